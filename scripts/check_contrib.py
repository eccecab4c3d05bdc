"""Runs one-node models of the com.microsoft contrib operators multigather implements in both
multigather and onnxruntime, on random float inputs: outputs must agree within rtol 1e-4.

usage: python scripts/check_contrib.py   (needs onnx, onnxruntime, numpy;
       MULTIGATHER = the binary, default target/release/multigather)

Covers Gelu, FastGelu (with and without bias), BiasGelu, QuickGelu,
SkipLayerNormalization (with beta, bias and the sum output), SkipSimplifiedLayerNormalization
and SimplifiedLayerNormalization (default domain), at batch 2 x sequence 5 x hidden 16.
BiasAdd is left out: onnxruntime implements it for CUDA only (its unit test is the check).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
B, S, H = 2, 5, 16
ort.set_default_logger_severity(3)


def case(op, inputs, outputs=("y",), domain="com.microsoft", **attrs):
    """A one-node model: inputs are (name, shape) pairs, all float."""
    node = helper.make_node(op, [n for n, _ in inputs], list(outputs), domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


X, V = ("x", [B, S, H]), [H]
CASES = {
    "gelu": case("Gelu", [X]),
    "fast_gelu": case("FastGelu", [X]),
    "fast_gelu_bias": case("FastGelu", [X, ("b", V)]),
    "bias_gelu": case("BiasGelu", [X, ("b", V)]),
    "quick_gelu": case("QuickGelu", [X], alpha=1.5),
    "skip_layer_norm": case("SkipLayerNormalization",
                            [X, ("s", [B, S, H]), ("g", V), ("beta", V), ("b", V)],
                            outputs=("y", "", "", "sum"), epsilon=1e-5),
    "skip_simplified_layer_norm": case("SkipSimplifiedLayerNormalization",
                                       [X, ("s", [B, S, H]), ("g", V)], epsilon=1e-6),
    "simplified_layer_norm": case("SimplifiedLayerNormalization", [X, ("g", V)], domain="",
                                  axis=-1, epsilon=1e-6),
}


def main():
    rng = np.random.default_rng(0)
    failed = 0
    for name, model in CASES.items():
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "model.onnx")
            onnx.save(model, path)
            inputs = os.path.join(work, "inputs")
            os.makedirs(inputs)
            feeds = {}
            for vi in model.graph.input:
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
                feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
                with open(os.path.join(inputs, f"{vi.name}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(feeds[vi.name], vi.name).SerializeToString())
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
            out = os.path.join(work, "out")
            run = subprocess.run([BIN, "run", path, "--inputs", inputs, "--output-dir", out],
                                 capture_output=True, text=True)
            problem = run.stderr.strip() if run.returncode else None
            named = [o for o in model.graph.output if o.name]
            for k, w in enumerate(want):
                if problem:
                    break
                t = onnx.TensorProto()
                with open(os.path.join(out, f"output_{k}.pb"), "rb") as f:
                    t.ParseFromString(f.read())
                got = numpy_helper.to_array(t)
                if got.shape != w.shape or not np.allclose(got, w, rtol=1e-4, atol=1e-5):
                    problem = f"output {named[k].name} differs (max |diff| " \
                              f"{np.max(np.abs(got - w)) if got.shape == w.shape else 'shape'})"
            failed += bool(problem)
            print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}")
    print(f"contrib operators: {len(CASES) - failed} of {len(CASES)} match onnxruntime")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
