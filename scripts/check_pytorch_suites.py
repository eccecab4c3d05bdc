"""Runs the PyTorch-converted test suites that the onnx package ships, and requires every case to pass.

usage: python scripts/check_pytorch_suites.py
       (needs onnx; MULTIGATHER = the binary, default target/release/multigather)

The onnx package carries `onnx/backend/test/data/pytorch-converted` (modules such as `Conv2d`,
`LSTM`, `PReLU` exported by PyTorch's converter) and `pytorch-operator` (single torch operators).
Nothing is copied or committed: the cases are read where the package installed them.
`multigather test` runs every case except those that use a training operator (the
`ai.onnx.preview.training` domain, which an inference interpreter does not run), and the script
fails (exit 1) on any case that does not pass, a skip included.
"""
import os
import subprocess
import sys

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("MULTIGATHER", os.path.join(ROOT, "target/release/multigather"))
SUITES = ("pytorch-converted", "pytorch-operator")
TRAINING = "ai.onnx.preview.training"


def uses_training(model):
    """Whether a node of the model (or of a subgraph) is a training operator."""
    graphs = [model.graph]
    while graphs:
        g = graphs.pop()
        for node in g.node:
            if node.domain == TRAINING:
                return True
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    return False


def main():
    data = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data")
    failed = False
    for suite in SUITES:
        root = os.path.join(data, suite)
        cases = sorted(d for d in os.listdir(root)
                       if os.path.isfile(os.path.join(root, d, "model.onnx")))
        run, training = [], []
        for case in cases:
            model = onnx.load(os.path.join(root, case, "model.onnx"))
            (training if uses_training(model) else run).append(os.path.join(root, case))
        result = subprocess.run([BIN, "test", *run], capture_output=True, text=True)
        if result.returncode not in (0, 1):
            sys.exit(f"multigather test failed to run: {result.stderr.strip()}")
        lines = result.stdout.splitlines()
        bad = [l for l in lines[:-1] if not l.startswith("ok ")]
        print(f"{suite}: {lines[-1] if lines else 'no output'} of {len(cases)} cases "
              f"({len(training)} training cases not run)")
        for line in bad:
            print(f"  {line}")
        failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
