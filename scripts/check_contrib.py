"""Runs one-node models of the com.microsoft contrib operators multigather implements in both
multigather and onnxruntime, on random float inputs: outputs must agree within rtol 1e-4.

usage: python scripts/check_contrib.py   (needs onnx, onnxruntime, numpy;
       MULTIGATHER = the binary, default target/release/multigather)

Covers Gelu, FastGelu (with and without bias), BiasGelu, QuickGelu,
SkipLayerNormalization (with beta, bias and the sum output), SkipSimplifiedLayerNormalization
and SimplifiedLayerNormalization (default domain), at batch 2 x sequence 5 x hidden 16.
QLinearSigmoid and QLinearLeakyRelu run on uint8 and int8 inputs with per-tensor scales and zero
points (initializers); their outputs must match exactly.
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


def case(op, inputs, outputs=("y",), domain="com.microsoft", dtype=TensorProto.FLOAT,
         consts=(), **attrs):
    """A one-node model: inputs are (name, shape) pairs of `dtype`, then `consts` (numpy arrays,
    named) as initializers; an empty name is an absent optional input."""
    names = [n for n, _ in inputs] + [n for n, _ in consts]
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs if o],
        initializer=[numpy_helper.from_array(v, n) for n, v in consts if n])
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


def qlinear(op, np_type, zero, **attrs):
    """A QLinear unary operator on `np_type` with scales 0.05 in / 0.01 out and zero points
    `zero` in / `zero + 3` out (absent when `zero` is None)."""
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(np_type))
    z = (lambda n, v: (n, np.array(v, np_type))) if zero is not None else (lambda n, v: ("", None))
    return case(op, [X], dtype=dtype, consts=[
        ("sx", np.array(0.05, np.float32)), z("zx", zero),
        ("sy", np.array(0.01, np.float32)), z("zy", (zero or 0) + 3)], **attrs)


CASES.update({
    "qlinear_sigmoid_u8": qlinear("QLinearSigmoid", np.uint8, 128),
    "qlinear_sigmoid_i8": qlinear("QLinearSigmoid", np.int8, None),
    "qlinear_leaky_relu_u8": qlinear("QLinearLeakyRelu", np.uint8, 120, alpha=0.1),
    "qlinear_leaky_relu_i8": qlinear("QLinearLeakyRelu", np.int8, -5, alpha=0.2),
})


def random_input(rng, dtype, dims):
    """Standard normal floats, or every value of an 8-bit integer type."""
    if dtype == TensorProto.FLOAT:
        return rng.standard_normal(dims).astype(np.float32)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    info = np.iinfo(np_type)
    return rng.integers(info.min, info.max, size=dims, endpoint=True).astype(np_type)


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
                feeds[vi.name] = random_input(rng, vi.type.tensor_type.elem_type, dims)
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
                if got.shape != w.shape or not np.allclose(got.astype(np.float64), w.astype(np.float64),
                                                        rtol=1e-4, atol=1e-5):
                    problem = f"output {named[k].name} differs (max |diff| " \
                              f"{np.max(np.abs(got.astype(np.float64) - w)) if got.shape == w.shape else 'shape'})"
            failed += bool(problem)
            print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}")
    print(f"contrib operators: {len(CASES) - failed} of {len(CASES)} match onnxruntime")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
