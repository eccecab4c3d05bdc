"""The models as people deploy them, against onnxruntime: the BERT-style encoder of
scripts/make_transformer.py in float32, quantised three ways by onnxruntime.quantization
(dynamic int8; static QDQ; static QOperator, calibrated on a fixed set of two batches) and
converted to float16 (keep_io_types), each run by `multigather run` and by onnxruntime at one
and two threads, medians of one run; the table gives the ratio.

usage: python scripts/check_deployed.py DIR [--repeat N] [--threads 1,2] [--skip NAME,...]
       (needs onnx, onnxruntime, numpy, sympy; MULTIGATHER = the binary, default
       target/release/multigather)

Outputs are compared with onnxruntime run without graph optimisations (whose kernels are the
operators as written): float32 within rtol 1e-4; the quantised and float16 models within a
tolerance of a few quantisation steps of the output's range, stated per model in the table
(`agree`), which prints the largest difference relative to that range. Prints one line per
model and thread count; exits 1 when a model fails to run or disagrees.
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from check_models import median_seconds

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
HERE = os.path.dirname(os.path.abspath(__file__))
ort.set_default_logger_severity(3)

# The largest difference to onnxruntime, relative to the output's range, each model may show.
TOLERANCE = {"float32": 1e-4, "dynamic": 0.05, "qdq": 0.05, "qoperator": 0.05, "float16": 0.01}


def feeds_for(model, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if "mask" in vi.name:
            feeds[vi.name] = np.ones(dims, dtype=np.int64)
        else:
            feeds[vi.name] = rng.integers(0, 2048, size=dims).astype(np.int64)
    return feeds


def make_models(out):
    subprocess.run([sys.executable, os.path.join(HERE, "make_transformer.py"), out], check=True)
    base = os.path.join(out, "transformer_b4s128.onnx")
    from onnxruntime.quantization import (
        CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load(base)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([feeds_for(model, seed) for seed in (1, 2)])

        def get_next(self):
            return next(self.batches, None)

    pre = os.path.join(out, "pre.onnx")
    quant_pre_process(base, pre, skip_symbolic_shape=True)
    paths = {"float32": base}
    paths["dynamic"] = os.path.join(out, "dynamic.onnx")
    quantize_dynamic(pre, paths["dynamic"], weight_type=QuantType.QInt8)
    for name, fmt in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
        paths[name] = os.path.join(out, f"{name}.onnx")
        quantize_static(pre, paths[name], Reader(), quant_format=fmt,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    from onnxruntime.transformers.float16 import convert_float_to_float16
    paths["float16"] = os.path.join(out, "float16.onnx")
    onnx.save(convert_float_to_float16(onnx.load(base), keep_io_types=True), paths["float16"])
    return paths


def check(name, path, work, threads, repeat):
    model = onnx.load(path)
    feeds = feeds_for(model, 0)
    inputs = os.path.join(work, f"{name}-inputs")
    os.makedirs(inputs, exist_ok=True)
    for key, value in feeds.items():
        with open(os.path.join(inputs, f"{key}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, key).SerializeToString())
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    rows = []
    for t in threads:
        options = ort.SessionOptions()
        options.intra_op_num_threads = t
        options.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        ort_s = median_seconds(lambda: sess.run(None, feeds), repeat)
        outdir = os.path.join(work, f"{name}-out{t}")
        run = subprocess.run([BIN, "run", path, "--inputs", inputs, "--repeat", str(repeat),
                              "--threads", str(t), "--json", "--output-dir", outdir],
                             capture_output=True, text=True)
        if run.returncode != 0:
            return None, f"multigather run failed: {run.stderr.strip()[-300:]}"
        mg_s = json.loads(run.stdout)["median_s"]
        worst = 0.0
        for k, want in enumerate(expected):
            tensor = onnx.TensorProto()
            with open(os.path.join(outdir, f"output_{k}.pb"), "rb") as f:
                tensor.ParseFromString(f.read())
            got = numpy_helper.to_array(tensor).astype(np.float64)
            span = float(np.max(want) - np.min(want)) or 1.0
            worst = max(worst, float(np.max(np.abs(got - want))) / span)
        rows.append((t, ort_s, mg_s, worst))
    return rows, None


def main():
    args = sys.argv[1:]
    repeat, threads, skip = 10, [1, 2], set()
    for flag in ("--repeat", "--threads", "--skip"):
        if flag in args:
            i = args.index(flag)
            value = args[i + 1]
            del args[i:i + 2]
            if flag == "--repeat":
                repeat = int(value)
            elif flag == "--threads":
                threads = [int(t) for t in value.split(",")]
            else:
                skip = set(value.split(","))
    out = args[0]
    os.makedirs(out, exist_ok=True)
    paths = make_models(out)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}; onnxruntime {ort.__version__}; medians of {repeat} runs")
    print(f"{'model':<12} {'threads':>7} {'onnxruntime':>12} {'multigather':>12} {'mg/ort':>7} {'max diff/range':>15} {'agree':>6}")
    failed = 0
    for name, path in paths.items():
        if name in skip:
            continue
        rows, error = check(name, path, out, threads, repeat)
        if error:
            print(f"{name:<12} FAIL {error}")
            failed += 1
            continue
        for t, ort_s, mg_s, worst in rows:
            ok = worst <= TOLERANCE[name]
            failed += not ok
            print(f"{name:<12} {t:>7} {ort_s * 1e3:>10.2f}ms {mg_s * 1e3:>10.2f}ms {mg_s / ort_s:>6.2f}x "
                  f"{worst:>15.2e} {'yes' if ok else 'NO':>6}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
