"""Models as people deploy them, against onnxruntime: each row of the table is run by
`multigather run` and by onnxruntime at one and two threads (medians of `--repeat` runs), and the
table gives the ratio. The rows (models generated with a fixed seed, quantised by
onnxruntime.quantization after its `quant_pre_process`, converted to float16 by
onnxruntime.transformers.float16 with keep_io_types):

- `encoder`: the BERT-style encoder of scripts/make_transformer.py (4 x 128 token ids), float32;
- `encoder_dynamic`: quantize_dynamic, int8 weights (MatMulInteger, DynamicQuantizeLinear);
- `encoder_qdq`, `encoder_qoperator`: quantize_static, uint8 activations and int8 weights
  calibrated on two fixed batches, as QuantizeLinear/DequantizeLinear pairs or as QLinear*
  operators;
- `encoder_float16`: the encoder in float16 (inputs and outputs kept);
- `resnet50`: the ResNet-50 of scripts/make_resnet.py (1x3x224x224 image, Conv + BN, 1000-way
  Gemm), float32 with its weights as initializers;
- `resnet50_ingraph`: the same function with its weights computed by the graph (Cast of float16
  Conv weights, Tile + Mul of the Gemm weight), which an engine must fold or recompute per run;
- `resnet50_dynamic`, `resnet50_qdq`, `resnet50_qoperator`, `resnet50_float16`: the ResNet
  converted as the encoder is (quant_pre_process folds each BatchNormalization into its Conv;
  then ConvInteger and a MatMulInteger for the Gemm; Conv between QDQ pairs; QLinearConv,
  QLinearAdd, QLinearGlobalAveragePool, QGemm; float16 Conv and BatchNormalization);
- `lstm`, `gru`: the 2-layer recurrent encoders of scripts/make_rnn.py (64 steps x batch 4 x 128
  features, hidden 256, second layer bidirectional), float32;
- `lstm_dynamic`: the LSTM through quantize_dynamic (com.microsoft DynamicQuantizeLSTM, int8
  weights).

usage: python scripts/check_deployed.py DIR [--repeat N] [--rounds R] [--threads 1,2] [--skip NAME,...]
                                            [--only NAME,...]
       (needs onnx, onnxruntime, numpy, sympy; MULTIGATHER = the binary, default
       target/release/multigather)

Models are written into DIR only when their file is missing there, so a second run reuses them
(`--only` and `--skip` also limit what is generated). Inputs come from a fixed seed: ImageNet-
normalised pixels for the image, standard normal floats for the sequences, token ids and an
all-ones mask for the encoder.

Outputs are compared with onnxruntime run without graph optimisations (whose kernels are the
operators as written): the table prints the largest difference relative to the output's range
(`max diff/range`) and whether it is within the model's tolerance (`agree`, TOLERANCE below).
On a CPU where onnxruntime's u8 x s8 products saturate in 16 bits (AVX2 without VNNI), an int8
row that onnxruntime's outputs fail is compared with its float32 source model instead (`(f32)`).
Prints the CPU, then one line per model and thread count; exits 1 when a model fails to run or
disagrees, after printing every row.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from check_models import median_seconds, ort_saturates_u8s8, uses_u8s8

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
HERE = os.path.dirname(os.path.abspath(__file__))
ort.set_default_logger_severity(3)

# The rows of the table, in order, with the largest difference to onnxruntime, relative to the
# output's range, each may show: float32 1e-4, float16 1e-2, int8 a few quantisation steps.
TOLERANCE = {
    "encoder": 1e-4,
    "encoder_dynamic": 5e-2,
    "encoder_qdq": 5e-2,
    "encoder_qoperator": 5e-2,
    "encoder_float16": 1e-2,
    "resnet50": 1e-4,
    "resnet50_ingraph": 1e-4,
    "resnet50_dynamic": 5e-2,
    "resnet50_qdq": 5e-2,
    "resnet50_qoperator": 5e-2,
    "resnet50_float16": 1e-2,
    "lstm": 1e-4,
    "lstm_dynamic": 5e-2,
    "gru": 1e-4,
}
# The rows a generator script writes; every other row is `SOURCE_KIND`, the model of row SOURCE
# converted as KIND (dynamic, qdq, qoperator, float16) says.
GENERATORS = {
    "encoder": "make_transformer.py",
    "resnet50": "make_resnet.py",
    "resnet50_ingraph": "make_resnet.py",
    "lstm": "make_rnn.py",
    "gru": "make_rnn.py",
}
# The files of rows not named NAME.onnx in DIR.
FILES = {"encoder": "transformer_b4s128.onnx"}

# Per-channel statistics of ImageNet, which a classifier's preprocessing normalises pixels with.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def feeds_for(model, seed):
    """Inputs for the graph inputs of `model`, drawn with `seed` by element type and name: a
    float input named `image` gets pixels uniform in [0, 1] normalised per channel as for
    ImageNet, other float inputs standard normal values; an integer input named `*mask*` is all
    ones (every token attended to), other integer inputs token ids below the encoder's 2048."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            if "image" in vi.name:
                value = (rng.random(dims, dtype=np.float32) - IMAGENET_MEAN) / IMAGENET_STD
            else:
                value = rng.standard_normal(dims)
        elif "mask" in vi.name:
            value = np.ones(dims)
        else:
            value = rng.integers(0, 2048, size=dims)
        feeds[vi.name] = value.astype(dtype)
    return feeds


def convert(kind, source, target, stage):
    """Writes `target`, the model file `source` converted as `kind` says: `dynamic`
    (quantize_dynamic, int8 weights), `qdq` or `qoperator` (quantize_static, uint8 activations,
    int8 weights, calibrated on two batches) or `float16`; `stage` is a scratch directory."""
    # Imported only when a model must be written: a run on cached models then needs neither
    # them nor sympy (which quant_pre_process imports).
    from onnxruntime.quantization import (
        CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from onnxruntime.transformers.float16 import convert_float_to_float16

    if kind == "float16":
        onnx.save(convert_float_to_float16(onnx.load(source), keep_io_types=True), target)
        return
    pre = os.path.join(stage, "pre.onnx")
    quant_pre_process(source, pre, skip_symbolic_shape=True)
    if kind == "dynamic":
        quantize_dynamic(pre, target, weight_type=QuantType.QInt8)
        return
    model = onnx.load(pre)

    class Calibration(CalibrationDataReader):
        """The calibration batches: the feeds of seeds 1 and 2."""

        def __init__(self):
            self.batches = iter([feeds_for(model, seed) for seed in (1, 2)])

        def get_next(self):
            return next(self.batches, None)

    fmt = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}[kind]
    quantize_static(pre, target, Calibration(), quant_format=fmt,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def model_path(name, out):
    """The model file of row `name` in `out`, written first when missing: by the row's generator
    script, or by converting its source row's model (itself written first when missing). Files
    are written in a scratch directory and moved into `out` when complete, so that an
    interrupted run leaves no partial model for the next run to take as generated."""
    path = os.path.join(out, FILES.get(name, f"{name}.onnx"))
    if os.path.exists(path):
        return path
    with tempfile.TemporaryDirectory(dir=out, prefix=".stage-") as stage:
        if name in GENERATORS:
            subprocess.run([sys.executable, os.path.join(HERE, GENERATORS[name]), stage], check=True)
        else:
            source, kind = name.rsplit("_", 1)
            convert(kind, model_path(source, out), os.path.join(stage, os.path.basename(path)), stage)
        # A generator writes its sibling rows too (make_resnet.py both ResNets): keep them all.
        for file in os.listdir(stage):
            if file.endswith(".onnx") and file != "pre.onnx" and not os.path.exists(os.path.join(out, file)):
                os.replace(os.path.join(stage, file), os.path.join(out, file))
    return path


def check(name, path, work, threads, repeat, rounds=1, source=None, saturating=False):
    """Runs the model at `path` in onnxruntime and multigather at each thread count; returns a
    row per count: (threads, onnxruntime s, multigather s, largest difference relative to the
    output's range, oracle, None) or (threads, None, None, None, None, what failed).

    The oracle is onnxruntime run without graph optimisations (`ort`), except where onnxruntime
    sums u8 x s8 products with 16-bit saturation (`saturating`: AVX2 without VNNI, as its
    quantization docs warn) and the model multiplies by int8 weights: there, when onnxruntime's
    outputs are out of tolerance, the float32 model at `source` the row was quantised from is
    the oracle (`f32`), within the same tolerance."""
    model = onnx.load(path)
    feeds = feeds_for(model, 0)
    fallback = saturating and source is not None and uses_u8s8(model)
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
        outdir = os.path.join(work, f"{name}-out{t}")
        ort_rounds, mg_rounds, failed = [], [], None
        for r in range(rounds):
            ort_rounds.append(median_seconds(lambda: sess.run(None, feeds), repeat))
            args = [BIN, "run", path, "--inputs", inputs, "--repeat", str(repeat),
                    "--threads", str(t), "--json"]
            run = subprocess.run(args + (["--output-dir", outdir] if r == 0 else []),
                                 capture_output=True, text=True)
            if run.returncode != 0:
                failed = f"multigather run failed: {run.stderr.strip()[-300:]}"
                break
            mg_rounds.append(json.loads(run.stdout)["median_s"])
        if failed:
            rows.append((t, None, None, None, None, failed))
            continue
        ort_s, mg_s = float(np.median(ort_rounds)), float(np.median(mg_rounds))
        got = []
        for k in range(len(expected)):
            tensor = onnx.TensorProto()
            with open(os.path.join(outdir, f"output_{k}.pb"), "rb") as f:
                tensor.ParseFromString(f.read())
            got.append(numpy_helper.to_array(tensor).astype(np.float64))
        worst, problem = relative_difference(got, expected)
        oracle = "ort"
        if not problem and worst > TOLERANCE[name] and fallback:
            if not isinstance(fallback, list):
                fallback = ort.InferenceSession(source, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
            worst, problem = relative_difference(got, fallback)
            oracle = "f32"
        rows.append((t, None, None, None, None, problem) if problem else (t, ort_s, mg_s, worst, oracle, None))
    return rows


def relative_difference(got, expected):
    """The largest difference of outputs `got` to `expected`, relative to each expected output's
    range, and None; or 0 and what differs in shape."""
    worst = 0.0
    for k, (have, want) in enumerate(zip(got, expected)):
        if have.shape != want.shape:
            return 0.0, f"output {k}: shape {have.shape} != the oracle's {want.shape}"
        span = float(np.max(want) - np.min(want)) or 1.0
        worst = max(worst, float(np.max(np.abs(have - want))) / span)
    return worst, None


def names(value):
    """The row names of a comma-separated `--only`/`--skip` value; exits on an unknown one."""
    chosen = value.split(",")
    unknown = [n for n in chosen if n not in TOLERANCE]
    if unknown:
        sys.exit(f"unknown model(s) {', '.join(unknown)}; the rows are {', '.join(TOLERANCE)}")
    return set(chosen)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="where the models, inputs and outputs are written (reused)")
    parser.add_argument("--repeat", type=int, default=10, help="runs per engine; medians (10)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternations of the two engines; medians of the rounds' medians (1)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    parser.add_argument("--skip", type=names, default=set(), help="rows to leave out")
    parser.add_argument("--only", type=names, default=set(TOLERANCE), help="rows to run")
    args = parser.parse_args()
    repeat, rounds, skip, only = args.repeat, max(1, args.rounds), args.skip, args.only
    threads = [int(t) for t in args.threads.split(",")]
    out = args.dir
    os.makedirs(out, exist_ok=True)
    rows = [name for name in TOLERANCE if name in only and name not in skip]
    paths = {name: model_path(name, out) for name in rows}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}; onnxruntime {ort.__version__}; medians of {repeat} runs"
          + (f", {rounds} alternated rounds" if rounds > 1 else ""))
    print(f"{'model':<18} {'threads':>7} {'onnxruntime':>12} {'multigather':>12} {'mg/ort':>7} {'max diff/range':>15} {'agree':>6}")
    failed = 0
    saturating = ort_saturates_u8s8()
    by_float = False
    for name, path in paths.items():
        source = None if name in GENERATORS else model_path(name.rsplit("_", 1)[0], out)
        try:
            results = check(name, path, out, threads, repeat, rounds, source, saturating)
        except Exception as e:  # onnx and onnxruntime raise their own error types
            results = [(t, None, None, None, None, f"{type(e).__name__}: {str(e)[:300]}") for t in threads]
        for t, ort_s, mg_s, worst, oracle, error in results:
            if error:
                failed += 1
                print(f"{name:<18} {t:>7} FAIL {error}", flush=True)
                continue
            ok = worst <= TOLERANCE[name]
            failed += not ok
            by_float |= oracle == "f32"
            verdict = ("yes" if ok else "NO") + (" (f32)" if oracle == "f32" else "")
            print(f"{name:<18} {t:>7} {ort_s * 1e3:>10.2f}ms {mg_s * 1e3:>10.2f}ms {mg_s / ort_s:>6.2f}x "
                  f"{worst:>15.2e} {verdict:>6}", flush=True)
    if by_float:
        print("(f32): onnxruntime sums u8 x s8 products with 16-bit saturation on this CPU (AVX2 "
              "without VNNI), out of tolerance here, so the row is compared with the float32 model "
              "it was quantised from")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
