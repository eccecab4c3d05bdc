"""Writes tests/old_opsets/op_versions.txt: every version of every operator of the default
domain and ai.onnx.ml in onnx's schema history.

usage: python scripts/gen_op_versions.py [OUT]   (needs the onnx package)

One line per schema version: domain (`ai.onnx` or `ai.onnx.ml`), operator, the opset it starts
at, and `deprecated` for the versions that remove an operator. `tests/op_versions.rs` requires
the interpreter to register every version that is not deprecated, or `docs/conformance.md` to
list it with a reason. The file is committed; `cargo test` needs no Python.
"""
import os
import sys

import onnx
import onnx.defs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/old_opsets/op_versions.txt")
DOMAINS = {"": "ai.onnx", "ai.onnx.ml": "ai.onnx.ml"}


def main():
    rows = sorted(
        (DOMAINS[s.domain], s.name, s.since_version, "deprecated" if s.deprecated else "")
        for s in onnx.defs.get_all_schemas_with_history()
        if s.domain in DOMAINS
    )
    with open(OUT, "w") as f:
        f.write(f"# Written by scripts/gen_op_versions.py from onnx {onnx.__version__}.\n")
        f.write("# domain\top\tsince\tstatus\n")
        for domain, name, since, status in rows:
            f.write(f"{domain}\t{name}\t{since}\t{status}".rstrip() + "\n")
    print(f"{len(rows)} operator versions -> {OUT}")


if __name__ == "__main__":
    main()
