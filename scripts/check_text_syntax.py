"""Checks that the text form of small models parses back with onnx.parser to the same graph.

usage: python scripts/check_text_syntax.py DIR...     (needs onnx; MULTIGATHER = the binary)

For every model.onnx under DIR, `multigather inspect` prints the text form with no elision; the
onnx parser reads it back, and the graph (nodes, attributes, inputs, outputs, initializers) must
print identically to the original's with onnx.printer. Exits 1 on any difference.
"""
import glob
import os
import subprocess
import sys

import onnx

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")


def main():
    failed = checked = 0
    for root in sys.argv[1:]:
        for path in sorted(glob.glob(os.path.join(root, "**", "*.onnx"), recursive=True)):
            text = subprocess.run([BIN, "inspect", path, "--max-elements", "1000000"],
                                  check=True, capture_output=True, text=True).stdout
            original = onnx.load(path)
            if original.graph.sparse_initializer or original.training_info:
                print(f"skip {path}: sparse initializers and training info have no textual syntax")
                continue
            try:
                parsed = onnx.parser.parse_model(text)
                functions_ok = [onnx.printer.to_text(f) for f in parsed.functions] == \
                               [onnx.printer.to_text(f) for f in original.functions]
                same = onnx.printer.to_text(parsed.graph) == onnx.printer.to_text(original.graph) and functions_ok
                why = "it parses to a different graph"
            except Exception as e:  # the parser raises its own error types
                same, why = False, str(e)[:400]
            checked += 1
            if not same:
                failed += 1
                print(f"FAIL {path}: {why}")
    print(f"text form: {checked - failed} of {checked} models parse back identically")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
