"""Runs the full ONNX backend node-test suite and diffs the passing set against the manifest.

usage: python scripts/check_conformance.py [--update]
       (needs onnx and numpy; MULTIGATHER = the binary, default target/release/multigather)

Writes the suite with scripts/gen_node_tests.py into target/node-tests (once, and again when it
lacks a test the manifest names), runs
`multigather test` on it, and compares the tests that pass with tests/conformance/passing.txt:
a test in the manifest that no longer passes is a regression (exit 1); a newly passing test is
reported so the manifest can be updated (`--update` rewrites it).
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("MULTIGATHER", os.path.join(ROOT, "target/release/multigather"))
SUITE = os.path.join(ROOT, "target/node-tests")
MANIFEST = os.path.join(ROOT, "tests/conformance/passing.txt")


def main():
    with open(MANIFEST) as f:
        manifest = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    # A suite written before the generator wrote a test the manifest names (sequences and
    # optionals, say) is written again, so that test is not reported as a regression.
    stale = os.path.isdir(SUITE) and any(
        not os.path.isdir(os.path.join(SUITE, name)) for name in manifest)
    if stale:
        shutil.rmtree(SUITE)
    if not os.path.isdir(SUITE):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gen_node_tests.py"), SUITE],
                       check=True)
    run = subprocess.run([BIN, "test", SUITE], capture_output=True, text=True)
    if run.returncode not in (0, 1):
        sys.exit(f"multigather test failed to run: {run.stderr.strip()}")
    lines = run.stdout.splitlines()
    passing = {l.split()[1] for l in lines if l.startswith("ok ")}
    regressions = sorted(manifest - passing)
    new = sorted(passing - manifest)
    print(lines[-1] if lines else "no output", f"(of {len(lines) - 1} tests)")
    for name in regressions:
        detail = next((l for l in lines if l.split()[1:2] == [name]), name)
        print(f"REGRESSION {detail}")
    if new:
        print(f"{len(new)} test(s) pass that are not in the manifest: {' '.join(new[:20])}")
    if "--update" in sys.argv:
        with open(MANIFEST, "w") as f:
            f.write("# ONNX node tests that pass (scripts/check_conformance.py --update)\n")
            f.writelines(f"{name}\n" for name in sorted(passing))
    sys.exit(1 if regressions and "--update" not in sys.argv else 0)


if __name__ == "__main__":
    main()
