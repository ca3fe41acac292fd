#!/usr/bin/env python3
"""tests/layers/check_function_lengths_test.py: proves
scripts/check-function-lengths can fail.

Copies engine/ and sim/ into a scratch directory, expects the copy to pass,
then appends a 71-line function to engine/worker.cc and expects exit 1
naming that file, line and function; then the same function with the
exemption comment above it, which must pass.

    check_function_lengths_test.py SCRIPT SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile


def long_function(exempt):
    head = "// Planted by the test; it reads better as one function.\n" if exempt else ""
    body = "".join(f"  x += {i};\n" for i in range(68))
    return f"{head}int PlantedLong(int x) {{\n{body}  return x;\n}}\n"


def run(script, root):
    p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    script, src = sys.argv[1], sys.argv[2]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in ("clean", "plant", "exempt"):
            root = os.path.join(tmp, case)
            for top in ("engine", "sim"):
                shutil.copytree(os.path.join(src, top), os.path.join(root, top))
            path = os.path.join(root, "engine/worker.cc")
            with open(path, encoding="utf-8") as f:
                n = sum(1 for _ in f) + 1
            if case != "clean":
                with open(path, "a", encoding="utf-8") as f:
                    f.write(long_function(case == "exempt"))
            rc, out = run(script, root)
            line = n + (1 if case == "exempt" else 0)
            want = f"engine/worker.cc:{line}: PlantedLong is 71 lines"
            ok = (rc == 0) if case != "plant" else (rc == 1 and want in out)
            if not ok:
                print(f"FAIL: {case}: exit {rc}, expected "
                      f"{'1 and ' + repr(want) if case == 'plant' else '0'} in:\n{out}")
                failures += 1
            else:
                print(f"ok: {case}")
    print(f"{3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
