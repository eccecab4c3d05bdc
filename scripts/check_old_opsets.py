"""Runs the ONNX node tests converted down to opsets 6 and 1 and diffs the passing set against
the manifest tests/old_opsets/converted_passing.txt.

usage: python scripts/check_old_opsets.py [--update]
       (needs onnx and numpy; MULTIGATHER = the binary, default target/release/multigather)

Writes the set with `scripts/gen_old_opset_tests.py converted` into target/old-opset-tests
(once), runs `multigather test` on it and on the committed legacy tests (tests/old_opsets/node,
which must all pass), and compares the converted tests that pass with the manifest: a test in the
manifest that no longer passes is a regression (exit 1); `--update` rewrites the manifest.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("MULTIGATHER", os.path.join(ROOT, "target/release/multigather"))
SUITE = os.path.join(ROOT, "target/old-opset-tests")
LEGACY = os.path.join(ROOT, "tests/old_opsets/node")
MANIFEST = os.path.join(ROOT, "tests/old_opsets/converted_passing.txt")


def run(suite):
    """The `multigather test` lines of `suite`, by test name."""
    out = subprocess.run([BIN, "test", suite], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"multigather test {suite} failed to run: {out.stderr.strip()}")
    lines = out.stdout.splitlines()
    print(f"{os.path.relpath(suite, ROOT)}: {lines[-1] if lines else 'no output'}")
    return {l.split()[1]: l for l in lines[:-1] if len(l.split()) > 1}


def main():
    if not os.path.isdir(SUITE):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gen_old_opset_tests.py"),
                        "converted", SUITE], check=True)
    failed = False
    for name, line in sorted(run(LEGACY).items()):
        if not line.startswith("ok "):
            print(f"FAILED {line}")
            failed = True
    results = run(SUITE)
    passing = {n for n, l in results.items() if l.startswith("ok ")}
    with open(MANIFEST) as f:
        manifest = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    for name in sorted(manifest - passing):
        print(f"REGRESSION {results.get(name, name)}")
        failed = True
    for name in sorted(set(results) - passing):
        print(f"  not passing: {results[name]}")
    new = sorted(passing - manifest)
    if new:
        print(f"{len(new)} test(s) pass that are not in the manifest: {' '.join(new[:20])}")
    if "--update" in sys.argv:
        with open(MANIFEST, "w") as f:
            f.write("# Converted old-opset node tests that pass "
                    "(scripts/check_old_opsets.py --update)\n")
            f.writelines(f"{name}\n" for name in sorted(passing))
        failed = False
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
