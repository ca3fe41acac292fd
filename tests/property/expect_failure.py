#!/usr/bin/env python3
"""tests/property/expect_failure.py: a property run that must fail with a
given message (the property_*_mut_* meson tests).

Usage: expect_failure.py EXPECTED BINARY [ARGS...]

Runs BINARY (RC_PARAMS and FERRY_MUTATION come from the environment) and
passes only when it exits non-zero AND its output contains EXPECTED: a
broken contract must be caught by the rule written for it, not by any
failure. Prints the falsifying command list RapidCheck reported.
"""
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    expected, cmd = sys.argv[1], sys.argv[2:]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", check=False)
    out = p.stdout
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Falsifiable") or "FERRY_CHECK failed" in line:
            print("\n".join(lines[i:i + 40]))
            break
    if p.returncode == 0:
        print(f"expect_failure: {cmd[0]} passed; expected a failure naming: {expected}")
        return 1
    if expected not in out:
        print(out[-4000:])
        print(f"expect_failure: failed (exit {p.returncode}) without the expected message: "
              f"{expected}")
        return 1
    print(f"expect_failure: failed as expected (exit {p.returncode}): {expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
