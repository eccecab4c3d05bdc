"""Runs real models in multigather and onnxruntime side by side: outputs must agree within float
tolerance, the rewrite must verify bit for bit, and run times are reported as ratios.

usage: python scripts/check_models.py DIR... [--repeat N] [--rounds R] [--threads 1,2]
       (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary, default target/release/multigather)

For every .onnx file under DIR, inputs are drawn from the declared types with a fixed seed:
symbolic and unknown dims are 1, except the last dim of a rank-2 float input named `input`
(audio samples: 512) and unknown spatial dims of a rank-4 float input (an image: 320, channels 3);
inputs named `state`, `h`, `c` are zeros; an int64 scalar `sr` is 16000
(the sample rate the silero-vad models expect). For each model:
  1. onnxruntime and `multigather run` on the original model agree (rtol 1e-4, atol 1e-5);
  2. `multigather verify --inputs` (rewrite in memory, compare bit for bit) succeeds;
  3. median run times of both are printed with their ratio, for each thread count of
     `--threads` (default 1; e.g. `--threads 1,2`), onnxruntime's intra-op threads and
     multigather's `--threads` set alike. With `--rounds R` (default 1) the two take turns R
     times, `--repeat` runs each turn, and each side's time is the median of its R medians: a
     busy host then slows both alike instead of whichever ran during the burst.
Prints one line per model and exits 1 on any failure.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
ort.set_default_logger_severity(3)


# Operators whose onnxruntime kernels multiply uint8 activations by int8 weights.
# (MatMulInteger, ConvInteger and the QLinear products among them: one MLAS kernel.)
U8S8_OPS = {"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv", "MatMulIntegerToFloat",
            "DynamicQuantizeMatMul", "QGemm", "QAttention", "DynamicQuantizeLSTM"}


def ort_saturates_u8s8():
    """Whether onnxruntime on this CPU sums u8 x s8 products in saturating 16-bit pairs
    (vpmaddubsw on AVX2 without VNNI, as its quantization docs warn): then its results for
    uint8 activations and int8 weights are not exact, and cannot be the oracle."""
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])
    b = numpy_helper.from_array(np.array([[127], [127]], np.int8), "b")
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [a], [y], [b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run(None, {"a": np.array([[255, 255]], np.uint8)})[0]
    return int(got[0, 0]) != 2 * 255 * 127


def uses_u8s8(model):
    """Whether the model has an operator of U8S8_OPS with an int8 weight or input."""
    int8 = {i.name for i in model.graph.initializer if i.data_type == TensorProto.INT8}
    int8 |= {v.name for v in model.graph.input if v.type.tensor_type.elem_type == TensorProto.INT8}
    return any(n.op_type in U8S8_OPS and int8.intersection(n.input) for n in model.graph.node)


def make_inputs(model, rng):
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        if vi.name == "input" and len(dims) == 2 and not tt.shape.dim[1].HasField("dim_value"):
            dims[1] = 512
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating) and len(dims) == 4:
            for i, default in ((1, 3), (2, 320), (3, 320)):
                if not tt.shape.dim[i].HasField("dim_value"):
                    dims[i] = default
        if vi.name == "sr":
            feeds[vi.name] = np.array(16000, dtype=dtype).reshape(dims)
        elif vi.name in ("state", "h", "c"):
            feeds[vi.name] = np.zeros(dims, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[vi.name] = (0.1 * rng.standard_normal(dims)).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, 2, size=dims).astype(dtype)
    return feeds


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def check(path, work, repeat, rtol=1e-4, atol=1e-5):
    model = onnx.load(path)
    feeds = make_inputs(model, np.random.default_rng(0))
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs)
    for name, value in feeds.items():
        with open(os.path.join(inputs, f"{name}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(value), name).SerializeToString())
    times = []
    expected = None
    for threads in THREADS:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        expected = sess.run(None, feeds)
        outdir = os.path.join(work, f"outputs{threads}")
        ort_rounds, mg_rounds = [], []
        for r in range(ROUNDS):
            ort_rounds.append(median_seconds(lambda: sess.run(None, feeds), repeat))
            args = [BIN, "run", path, "--inputs", inputs, "--repeat", str(repeat),
                    "--threads", str(threads), "--json"]
            if r == 0:
                args += ["--output-dir", outdir]
            run = subprocess.run(args, check=True, capture_output=True, text=True)
            mg_rounds.append(json.loads(run.stdout)["median_s"])
        times.append((threads, float(np.median(ort_rounds)), float(np.median(mg_rounds))))
        for k, want in enumerate(expected):
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(outdir, f"output_{k}.pb"), "rb").read())
            got = numpy_helper.to_array(t)
            if got.shape != want.shape:
                return f"output {k}: shape {got.shape} != onnxruntime's {want.shape}", None
            if np.issubdtype(want.dtype, np.floating):
                if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
                    diff = np.max(np.abs(got.astype(np.float64) - want))
                    return f"output {k}: max |diff| {diff:.3g} vs onnxruntime", None
            elif not np.array_equal(got, want):
                return f"output {k}: differs from onnxruntime", None
    subprocess.run([BIN, "verify", path, "--inputs", inputs], check=True, capture_output=True)
    return None, times


THREADS = [1]
ROUNDS = 1


def main():
    args = sys.argv[1:]
    repeat = 20
    if "--threads" in args:
        i = args.index("--threads")
        THREADS[:] = [int(t) for t in args[i + 1].split(",")]
        del args[i:i + 2]
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i:i + 2]
    if "--rounds" in args:
        i = args.index("--rounds")
        global ROUNDS
        ROUNDS = max(1, int(args[i + 1]))
        del args[i:i + 2]
    models = []
    for root in args:
        models += sorted(glob.glob(os.path.join(root, "**", "*.onnx"), recursive=True))
    failed = 0
    print(f"{'model':<36} {'threads':>7} {'onnxruntime':>12} {'multigather':>12} {'mg/ort':>7}")
    for path in models:
        with tempfile.TemporaryDirectory() as work:
            try:
                problem, times = check(path, work, repeat)
            except subprocess.CalledProcessError as e:
                problem, times = (e.stderr or "").strip() or str(e), None
            except Exception as e:  # onnx and onnxruntime raise their own error types
                problem, times = f"{type(e).__name__}: {str(e)[:300]}", None
        name = os.path.basename(path)
        if problem:
            failed += 1
            print(f"FAIL {name}: {problem}")
        else:
            for threads, ort_s, mg_s in times:
                print(f"{name:<36} {threads:>7} {ort_s * 1e3:>10.3f}ms {mg_s * 1e3:>10.3f}ms "
                      f"{mg_s / ort_s:>7.2f}")
    print(f"models: {len(models) - failed} of {len(models)} run, match onnxruntime and verify")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
