#!/usr/bin/env python3
"""tests/layers/check_layers_test.py: proves scripts/check-layers can fail.

Copies the folders it checks into a scratch directory, expects the copy to
pass, then plants one forbidden #include per rule (L1-L6) in its own fresh
copy and expects check-layers to exit 1 naming that file, line and rule.

    check_layers_test.py SCRIPT SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

TOPS = ("engine", "hal", "sim", "base", "include", "tools", "bench")

# (file to plant in, line to append, rule expected)
PLANTS = [
    ("engine/worker.cc", '#include "sim/rnic/fabric.h"', "L1"),
    ("engine/task.h", '#include "hal/tcp/tcp_control_net.h"', "L1"),
    ("hal/verbs.h", '#include "engine/task.h"', "L2"),
    ("hal/tcp/tcp_control_net.cc", "#include <infiniband/verbs.h>", "L3"),
    ("engine/context.cc", "#include <infiniband/verbs.h>", "L3"),
    ("sim/rnic/fabric.cc", '#include "engine/worker.h"', "L4"),
    ("sim/net/sim_network.cc", '#include "engine/accept.h"', "L4"),
    ("sim/world/swarm.cc", '#include "engine/worker.h"', "L5"),
    ("sim/world/two_engines.h", '#include "engine/engine_impl.h"', "L5"),
    ("include/ferry/engine.h", '#include "engine/engine_impl.h"', "L6"),
    ("include/ferry/testing.h", '#include "sim/rnic/fabric.h"', "L6"),
]


def copy(src, dst):
    for top in TOPS:
        if os.path.isdir(os.path.join(src, top)):
            shutil.copytree(os.path.join(src, top), os.path.join(dst, top))


def run(script, root):
    p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    script, src = sys.argv[1], sys.argv[2]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        copy(src, clean)
        rc, out = run(script, clean)
        if rc != 0:
            print(f"FAIL: the unmodified copy does not pass (exit {rc}):\n{out}")
            failures += 1
        for i, (path, line, rule) in enumerate(PLANTS):
            root = os.path.join(tmp, f"plant{i}")
            copy(src, root)
            full = os.path.join(root, path)
            with open(full, encoding="utf-8") as f:
                n = sum(1 for _ in f) + 1
            with open(full, "a", encoding="utf-8") as f:
                f.write(line + "\n")
            rc, out = run(script, root)
            want = f"{path}:{n}: {rule} "
            if rc != 1 or want not in out:
                print(f"FAIL: planting {line!r} in {path}: exit {rc}, expected 1 and "
                      f"{want!r} in:\n{out}")
                failures += 1
            else:
                print(f"ok: {path}:{n} {rule} caught")
    print(f"{len(PLANTS) + 1 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
