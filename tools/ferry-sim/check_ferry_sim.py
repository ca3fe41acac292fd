#!/usr/bin/env python3
# tools/ferry-sim/check_ferry_sim.py: meson tests (suite 'sim') that run the
# ferry-sim binary and check what a user relies on: a replay gives the same
# trace hash, the Perfetto file is valid JSON, a contract mutation gives the
# safety exit code and a replay command, and the exit codes of docs/
# simulator.md. Exit 0 = pass; anything else fails the meson test.
#
# Usage: check_ferry_sim.py replay_hash|perfetto|mutation|campaign BINARY
import json
import os
import re
import subprocess
import sys
import tempfile

HASH_RE = re.compile(r"trace hash (0x[0-9a-f]{16})")


def run(args, env=None, timeout=100):
    full_env = dict(os.environ)
    full_env.pop("FERRY_MUTATION", None)
    if env:
        full_env.update(env)
    p = subprocess.run(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def fail(msg, out=""):
    print("FAIL:", msg)
    if out:
        print(out[-4000:])
    sys.exit(1)


def hash_of(binary, seed, *extra):
    rc, out, err = run([binary, "--seed", str(seed), *extra])
    if rc != 0:
        fail(f"seed {seed} {extra} exited {rc}", out + err)
    m = HASH_RE.search(out)
    if not m:
        fail(f"no trace hash printed for seed {seed}", out)
    return m.group(1)


def replay_hash(binary):
    a = hash_of(binary, 7)
    b = hash_of(binary, 7)
    c = hash_of(binary, 7, "--trace")
    d = hash_of(binary, 8)
    print(f"seed 7: {a} {b} (with --trace: {c}); seed 8: {d}")
    if a != b:
        fail(f"two replays of seed 7 differ: {a} vs {b}")
    if a != c:
        fail(f"recording the trace changed the hash: {a} vs {c}")
    if a == d:
        fail("seeds 7 and 8 gave the same trace hash")
    rc, out, _ = run([binary, "--seed", "7", "--trace"])
    if "world." not in out and "ep_ready" not in out:
        fail("the readable trace names no engine or world events", out)
    rc, out, err = run([binary, "--seeds", "1..4", "--mode", "determinism", "--quiet"])
    if rc != 0:
        fail(f"--mode determinism exited {rc}", out + err)


def perfetto(binary):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "seed3.json")
        rc, out, err = run([binary, "--seed", "3", "--perfetto", path])
        if rc != 0:
            fail(f"--perfetto exited {rc}", out + err)
        with open(path) as f:
            doc = json.load(f)
        events = doc.get("traceEvents")
        if not isinstance(events, list) or not events:
            fail("no traceEvents array")
        names = {e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        for want in ("rnic", "net", "h0/worker0", "h1/listener", "world", "main"):
            if want not in names:
                fail(f"no track named {want}: {sorted(names)}")
        instants = [e for e in events if e.get("ph") == "i"]
        steps = [e for e in events if e.get("ph") == "X"]
        if not instants or not steps:
            fail(f"{len(instants)} instant events, {len(steps)} step slices")
        print(f"{path}: {os.path.getsize(path)} bytes, {len(events)} events, "
              f"{len(names)} tracks")
        rc, _, _ = run([binary, "--seed", "3", "--perfetto", os.path.join(d, "no", "such.json")])
        if rc != 6:
            fail(f"an unwritable --perfetto file exited {rc}, want 6")


def mutation(binary):
    # Each class of failure from one contract mutation (base/mutation.h):
    # a verbs call off the owner is a fabric violation (safety, 2); a
    # forgotten object at shutdown is a leak (liveness, 3); a quota released
    # twice trips the ledger's FERRY_CHECK (crash, 4). Each failing seed
    # prints its replay command, which reproduces the same class.
    # (Every canary and its first catching seed: ferry-sim-mut --canaries,
    # meson test ferry_sim_canaries.)
    for name, want in (("c5_non_owner_call", 2), ("c9_leak_at_shutdown", 3),
                       ("c4_double_release", 4)):
        env = {"FERRY_MUTATION": name}
        rc, out, err = run([binary, "--seeds", "1..5", "--quiet"], env=env)
        if rc != want:
            fail(f"FERRY_MUTATION={name} exited {rc}, want {want}", out + err)
        m = re.search(r"replay: (FERRY_MUTATION=engine_" + name + r" \S+ --seed (\d+) --trace)",
                      out)
        if not m:
            fail(f"{name}: no replay command for a failing seed", out)
        seed = m.group(2)
        rc, out, err = run([binary, "--seed", seed], env=env)
        if rc != want:
            fail(f"{name}: replaying seed {seed} exited {rc}, want {want}", out + err)
        print(f"FERRY_MUTATION={name}: exit {want}, replay of seed {seed} agrees")
    # Usage errors: bad --seeds, a mutation name that does not exist.
    rc, _, _ = run([binary, "--seeds", "9..3"])
    if rc != 1:
        fail(f"bad --seeds exited {rc}, want 1")
    rc, _, _ = run([binary, "--seed", "1"], env={"FERRY_MUTATION": "no_such_switch"})
    if rc != 1:
        fail(f"unknown FERRY_MUTATION exited {rc}, want 1")
    rc, out, _ = run([binary, "--seeds", "1..3", "--quiet"])
    if rc != 0:
        fail(f"without a mutation the test build exited {rc}", out)


def jsonl_of(binary, *args):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.jsonl")
        rc, out, err = run([binary, *args, "--quiet", "--jsonl", path])
        if rc != 0:
            fail(f"{args} exited {rc}", out + err)
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()], out


def campaign(binary):
    # Shards are disjoint and complete, and a seed's run is the same in a
    # shard, in the full range and alone (trace hashes agree).
    full, _ = jsonl_of(binary, "--seeds", "1..9", "--jobs", "2")
    by_seed = {j["seed"]: j for j in full}
    if sorted(by_seed) != list(range(1, 10)):
        fail(f"full run seeds: {sorted(by_seed)}")
    seen = []
    with tempfile.TemporaryDirectory() as d:
        files = []
        for i in range(3):
            path = os.path.join(d, f"shard{i}.jsonl")
            rc, out, err = run([binary, "--seeds", "1..9", "--shard", f"{i}/3", "--quiet",
                                "--jsonl", path])
            if rc != 0:
                fail(f"shard {i}/3 exited {rc}", out + err)
            files.append(path)
            with open(path) as f:
                for line in f:
                    j = json.loads(line)
                    seen.append(j["seed"])
                    if j["trace_hash"] != by_seed[j["seed"]]["trace_hash"]:
                        fail(f"seed {j['seed']}: shard hash {j['trace_hash']} vs full "
                             f"{by_seed[j['seed']]['trace_hash']}")
                    for key in ("hosts", "nics_per_host", "workers", "plan_digest", "outcome",
                                "faults", "probes", "tasks", "virtual_ns", "wall_ms"):
                        if key not in j:
                            fail(f"no {key} in a JSONL line: {line}")
        if sorted(seen) != list(range(1, 10)):
            fail(f"shards 0..2 of 3 ran seeds {sorted(seen)}, want 1..9 once each")
        rc, out, err = run([binary, "summarize", *files])
        if rc != 0 or "ferry-sim summarize: 9 seeds from 3 file(s)" not in out or \
                "9 ok" not in out:
            fail(f"summarize of the three shards exited {rc}", out + err)
        for want in ("hosts ", "nics ", "workers ", "probes hit"):
            if want not in out:
                fail(f"summarize prints no '{want}'", out)
        bad = os.path.join(d, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"seed": 1}\n')
        rc, out, err = run([binary, "summarize", bad])
        if rc != 1 or "no \"hosts\" field" not in err:
            fail(f"summarize of a bad line exited {rc}", out + err)
    alone = hash_of(binary, 5)
    if alone != by_seed[5]["trace_hash"]:
        fail(f"seed 5 alone {alone} vs in the range {by_seed[5]['trace_hash']}")
    # The probe gate fails (exit 7) below its seed count, naming the reason.
    rc, out, _ = run([binary, "--seeds", "1..3", "--probe-gate", "--quiet"])
    if rc != 7 or "probe gate: FAILED: 3 seeds run, the gate needs at least 1000" not in out:
        fail(f"probe gate on 3 seeds exited {rc}", out)
    rc, out, _ = run([binary, "--seeds", "1..3", "--probe-gate", "--probe-gate-seeds", "3",
                      "--quiet"])
    if rc != 7 or "probe gate: FAILED: never hit:" not in out:
        fail(f"probe gate on 3 seeds (gate 3) exited {rc}", out)
    # A time budget stops the sweep cleanly and says how far it got.
    rc, out, _ = run([binary, "--seeds", "1..100000", "--time-budget-s", "2", "--quiet"])
    if rc != 0 or "time budget: stopped after 2 s with" not in out:
        fail(f"--time-budget-s 2 exited {rc}", out)
    # The random world on the determinism mode.
    rc, out, err = run([binary, "--seeds", "1..3", "--mode", "determinism", "--quiet"])
    if rc != 0:
        fail(f"--mode determinism on the random profile exited {rc}", out + err)
    for bad_args in (["--shard", "3/3"], ["--jobs", "0"], ["--profile", "huge"]):
        rc, _, _ = run([binary, "--seeds", "1..2", *bad_args])
        if rc != 1:
            fail(f"{bad_args} exited {rc}, want 1")
    print("shards disjoint and complete, hashes agree, summarize, probe gate, time budget")


def main():
    if len(sys.argv) != 3:
        fail("usage: check_ferry_sim.py replay_hash|perfetto|mutation|campaign BINARY")
    case, binary = sys.argv[1], sys.argv[2]
    {"replay_hash": replay_hash, "perfetto": perfetto, "mutation": mutation,
     "campaign": campaign}[case](binary)
    print("PASS", case)


if __name__ == "__main__":
    main()
