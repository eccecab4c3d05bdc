"""Single convolutions, each alone in a model, against onnxruntime: the shapes of ResNet-50's
layers, so a change to a convolution can be measured one shape at a time. By default 8-bit
ones (QLinearConv, uint8 activations, int8 weights per output channel); `--float` runs float32
`Conv`s with a bias instead.

usage: python scripts/bench_qconv.py DIR [--repeat N] [--threads T] [--float]
       (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary, default
       target/release/multigather)

Writes each model and its input into DIR (fixed seed), runs it `--repeat` times in both engines
at `--threads` threads, and prints one line per shape: the medians and their ratio. Exits 1 when
an output differs from onnxruntime's by more than one code (from onnx.reference's, where
onnxruntime's u8 x s8 sums saturate in 16 bits: AVX2 without VNNI).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_models import median_seconds, ort_saturates_u8s8  # noqa: E402

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")

# name: (input channels, output channels, kernel, stride, padding, input size)
SHAPES = {
    "stem_7x7s2": (3, 64, 7, 2, 3, 224),
    "conv_3x3": (64, 64, 3, 1, 1, 56),
    "conv_1x1": (256, 64, 1, 1, 0, 56),
    "expand_1x1": (64, 256, 1, 1, 0, 56),
    "down_1x1s2": (256, 512, 1, 2, 0, 56),
    "conv_3x3_28": (128, 128, 3, 1, 1, 28),
    "conv_3x3_14": (256, 256, 3, 1, 1, 14),
    "conv_1x1_14": (1024, 256, 1, 1, 0, 14),
    "conv_3x3_7": (512, 512, 3, 1, 1, 7),
    "expand_1x1_7": (512, 2048, 1, 1, 0, 7),
}


def write_float_model(path, shape, rng):
    cin, cout, k, s, p, hw = shape
    inits = [
        numpy_helper.from_array(rng.standard_normal((cout, cin, k, k), np.float32) * 0.05, "w"),
        numpy_helper.from_array(rng.standard_normal(cout, np.float32), "b"),
    ]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k],
                            strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return rng.standard_normal((1, cin, hw, hw), np.float32)


def write_model(path, shape, rng):
    cin, cout, k, s, p, hw = shape
    w = rng.integers(-127, 128, (cout, cin, k, k), dtype=np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
        numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(cout, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(cout, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
        numpy_helper.from_array(np.array(128, np.uint8), "yz"),
        numpy_helper.from_array(rng.integers(-1000, 1000, cout).astype(np.int32), "b"),
    ]
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
        kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph(
        [node], "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return rng.integers(0, 256, (1, cin, hw, hw), dtype=np.uint8)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--float", action="store_true", help="float32 Conv instead of QLinearConv")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(0)
    failed = False
    # Where onnxruntime sums u8 x s8 products with 16-bit saturation (AVX2 without VNNI), its
    # codes are no oracle for these full-range weights: onnx.reference's are.
    reference = not args.float and ort_saturates_u8s8()
    if reference:
        print("onnxruntime saturates u8 x s8 sums on this CPU: codes are checked against onnx.reference")
    print(f"{'shape':<12} {'onnxruntime':>12} {'multigather':>12} {'mg/ort':>7}")
    for name, shape in SHAPES.items():
        path = os.path.join(args.dir, f"{name}.onnx")
        x = (write_float_model if args.float else write_model)(path, shape, rng)
        inputs = os.path.join(args.dir, f"{name}-inputs")
        outdir = os.path.join(args.dir, f"{name}-out")
        os.makedirs(inputs, exist_ok=True)
        with open(os.path.join(inputs, "x.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        (want,) = sess.run(None, {"x": x})
        ort_s = median_seconds(lambda: sess.run(None, {"x": x}), args.repeat)
        run = subprocess.run([BIN, "run", path, "--inputs", inputs, "--repeat", str(args.repeat),
                              "--threads", str(args.threads), "--json", "--output-dir", outdir],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{name:<12} multigather failed: {run.stderr.strip()[-300:]}")
            failed = True
            continue
        mg_s = json.loads(run.stdout)["median_s"]
        tensor = onnx.TensorProto()
        with open(os.path.join(outdir, "output_0.pb"), "rb") as f:
            tensor.ParseFromString(f.read())
        got = numpy_helper.to_array(tensor)
        if args.float:
            off = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1.0))
            note = "" if off <= 1e-5 else f"  differs by {off:.2e} of the range"
            failed |= off > 1e-5
        else:
            if reference:
                from onnx.reference import ReferenceEvaluator
                (want,) = ReferenceEvaluator(path).run(None, {"x": x})
            off = int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))))
            note = "" if off <= 1 else f"  differs by {off} codes"
            failed |= off > 1
        print(f"{name:<12} {ort_s * 1e3:>10.3f}ms {mg_s * 1e3:>10.3f}ms {mg_s / ort_s:>6.2f}x{note}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
