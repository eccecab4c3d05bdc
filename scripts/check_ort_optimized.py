"""Models saved by onnxruntime's graph optimizer, run in multigather: each model the CI generates
(at small sizes) is saved through `SessionOptions.optimized_model_filepath` at the BASIC and
EXTENDED optimization levels (CPU provider), and each saved model is run by `multigather run`
against onnxruntime on the same inputs and checked by `multigather verify`.

usage: python scripts/check_ort_optimized.py DIR [--extra DIR...] [--only NAME,...]
       (needs onnx, onnxruntime, numpy, sympy; MULTIGATHER = the binary, default
       target/release/multigather)

The source models (written into DIR/source, reused when present; generated with the CI's
generator functions and fixed seeds):
- `convnet`: scripts/make_convnet.py (1x3x320x320 image; Conv + activation become FusedConv);
- `encoder`: the BERT-style encoder of scripts/make_transformer.py at batch 2 x 16 tokens,
  hidden 64, 4 heads, 2 layers (FusedMatMul, Gelu, SkipLayerNormalization, LayerNormalization),
  and `encoder_opset13`, the same at opset 13 (LayerNormalization as onnxruntime defines it
  before ONNX's opset 17);
- `gpt2`: scripts/make_gpt2.py (FusedMatMul, FastGelu, SkipLayerNormalization);
- `resnet`: scripts/make_resnet.py with two small stages (1x3x224x224 image, 16 classes);
- `lstm`, `gru`: scripts/make_rnn.py at 8 steps x batch 2 x 16 features, hidden 32;
- the conversions of scripts/check_deployed.py: `encoder_dynamic`, `encoder_qdq`,
  `encoder_qoperator`, `encoder_float16`, `resnet_qdq`, `resnet_qoperator`, `lstm_dynamic`
  (MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm, QLinearAdd, QLinearMul, QLinearSoftmax,
  QLinearGlobalAveragePool, DynamicQuantizeLSTM);
- every .onnx file of each `--extra` DIR (the CI passes target/ci-models: silero-vad).

Inputs are scripts/check_deployed.py's (`feeds_for`, seed 0), or scripts/check_models.py's for
`gpt2` (whose vocabulary is smaller) and the `--extra` models. For each source and level the
saved model (DIR/<name>_<level>.onnx) is run by onnxruntime with
its own optimizations off (its kernels are the operators as saved) and by `multigather run`;
the largest difference relative to the output's range must be within the source's tolerance
(float32 1e-4, float16 1e-2, 8-bit 5e-2), and `multigather verify` must pass. On a CPU where
onnxruntime's u8 x s8 products saturate in 16 bits (AVX2 without VNNI), a quantised row whose
outputs are out of that tolerance of onnxruntime's is compared with its float32 source instead. Each line names
the com.microsoft operators the saved model holds; the last lines list every operator seen per
level, and those onnxruntime's ENABLE_ALL level adds, which are not run: that level rewrites
convolutions into the `com.microsoft.nchwc` blocked layout (whose block size is the CPU's
vector width) and 8-bit ones into NHWC `com.microsoft.QLinearConv`, which multigather does not
implement (docs/conformance.md). Exits 1 when a model fails.
"""
import collections
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import check_deployed
import check_models
import make_convnet
import make_gpt2
import make_resnet
import make_rnn
import make_transformer

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
ort.set_default_logger_severity(3)

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}
# Vocabulary 2048: check_deployed.feeds_for draws token ids below 2048 (also for calibration).
ENCODER = dict(batch=2, seq=16, vocab=2048, hidden=64, heads=4, ffn=128, layers=2)
# The tolerance of each source, relative to each output's range; conversions take their kind's.
TOLERANCE = {"float16": 1e-2, "dynamic": 5e-2, "qdq": 5e-2, "qoperator": 5e-2}
FLOAT_TOLERANCE = 1e-4
# Sources whose token ids must stay below a vocabulary smaller than check_deployed.feeds_for's
# 2048: they take scripts/check_models.py's inputs (ids 0 and 1).
SMALL_VOCABULARY = {"gpt2"}


def small_resnet():
    """make_resnet's network with two small stages and 16 classes (its module constants)."""
    make_resnet.STAGES = [(16, 64, 1, 1), (32, 128, 1, 2)]
    make_resnet.CLASSES = 16
    return make_resnet.build(False)


def small_rnn(op):
    """make_rnn's two-layer network at 8 steps x batch 2 x 16 features, hidden 32."""
    make_rnn.SEQ, make_rnn.BATCH, make_rnn.INPUT, make_rnn.HIDDEN = 8, 2, 16, 32
    return make_rnn.build(op)


def encoder_opset13():
    """The encoder at opset 13, where LayerNormalization is onnxruntime's own definition in the
    default domain (ONNX has it from 17 on): what onnxruntime's LayerNormFusion writes into
    saved models of older opsets."""
    model = make_transformer.build(**ENCODER)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 13
    return model


BUILDERS = {
    "convnet": make_convnet.build,
    "encoder": lambda: make_transformer.build(**ENCODER),
    "encoder_opset13": encoder_opset13,
    "gpt2": make_gpt2.build,
    "resnet": small_resnet,
    "lstm": lambda: small_rnn("LSTM"),
    "gru": lambda: small_rnn("GRU"),
}
CONVERSIONS = ["encoder_dynamic", "encoder_qdq", "encoder_qoperator", "encoder_float16",
               "resnet_qdq", "resnet_qoperator", "lstm_dynamic"]


def sources(out, only):
    """The generated source models as (name, path), written into out/source when missing."""
    src = os.path.join(out, "source")
    os.makedirs(src, exist_ok=True)
    paths = {}
    for name in list(BUILDERS) + CONVERSIONS:
        base = name.rsplit("_", 1)[0] if name in CONVERSIONS else name
        if only and name not in only:
            continue
        path = os.path.join(src, f"{name}.onnx")
        if not os.path.exists(path):
            with tempfile.TemporaryDirectory(dir=src, prefix=".stage-") as stage:
                staged = os.path.join(stage, f"{name}.onnx")
                if name in BUILDERS:
                    onnx.save(BUILDERS[name](), staged)
                else:
                    base_path = os.path.join(src, f"{base}.onnx")
                    if not os.path.exists(base_path):
                        onnx.save(BUILDERS[base](), base_path)
                    check_deployed.convert(name.rsplit("_", 1)[1], base_path, staged, stage)
                os.replace(staged, path)
        paths[name] = path
    return paths


def optimize(source, target, level):
    """Saves `source` as onnxruntime's optimizer at `level` leaves it, into `target`."""
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.optimized_model_filepath = target
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def ops_of(path):
    """The operators of the model at `path`, as `domain:op` for those outside the default
    domain."""
    return collections.Counter(
        f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        for n in onnx.load(path).graph.node)


def check(path, feeds, tolerance, work, float_source=None):
    """Runs the model at `path` in onnxruntime (optimizations off) and multigather, then
    verifies its rewrite; returns (largest difference relative to range, problem or None).
    With `float_source` (a quantised row on a CPU where onnxruntime's u8 x s8 products saturate
    in 16 bits, `check_models.ort_saturates_u8s8`), outputs out of tolerance of onnxruntime's
    are compared with that float32 model's instead, within the same tolerance."""
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs)
    for key, value in feeds.items():
        with open(os.path.join(inputs, f"{key}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(value), key).SerializeToString())
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    out = os.path.join(work, "out")
    run = subprocess.run([BIN, "run", path, "--inputs", inputs, "--output-dir", out],
                         capture_output=True, text=True)
    if run.returncode:
        return None, f"multigather run failed: {run.stderr.strip()[-300:]}"
    got = []
    for k in range(len(expected)):
        tensor = onnx.TensorProto()
        with open(os.path.join(out, f"output_{k}.pb"), "rb") as f:
            tensor.ParseFromString(f.read())
        got.append(numpy_helper.to_array(tensor))
    worst, problem = difference(got, expected)
    if not problem and worst > tolerance and float_source and check_models.uses_u8s8(onnx.load(path)):
        oracle = ort.InferenceSession(float_source, plain, providers=["CPUExecutionProvider"])
        worst, problem = difference(got, oracle.run(None, feeds))
    if not problem and worst > tolerance:
        problem = f"max diff/range {worst:.2e} > {tolerance:.0e}"
    if problem:
        return worst, problem
    verify = subprocess.run([BIN, "verify", path, "--inputs", inputs], capture_output=True, text=True)
    if verify.returncode:
        return worst, f"multigather verify failed: {verify.stderr.strip()[-300:]}"
    return worst, None


def difference(got, expected):
    """The largest difference of the float outputs `got` to `expected`, relative to each one's
    range, and None; or None and what differs (a shape, an integer output's values)."""
    worst = 0.0
    for k, (have, want) in enumerate(zip(got, expected)):
        if have.shape != want.shape:
            return None, f"output {k}: shape {have.shape} != the oracle's {want.shape}"
        if not np.issubdtype(want.dtype, np.floating):
            if not np.array_equal(have, want):
                return None, f"output {k} differs from the oracle"
            continue
        span = float(np.max(want) - np.min(want)) if want.size else 0.0
        diff = float(np.max(np.abs(have.astype(np.float64) - want))) if want.size else 0.0
        worst = max(worst, diff / (span or 1.0))
    return worst, None


def main():
    args = sys.argv[1:]
    extra, only = [], set()
    while "--extra" in args:
        i = args.index("--extra")
        extra.append(args[i + 1])
        del args[i:i + 2]
    if "--only" in args:
        i = args.index("--only")
        only = set(args[i + 1].split(","))
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    out = args[0]
    models = [(name, path, False) for name, path in sources(out, only).items()]
    for d in extra:
        for file in sorted(os.listdir(d)):
            name = file[:-len(".onnx")]
            if file.endswith(".onnx") and (not only or name in only):
                models.append((name, os.path.join(d, file), True))
    seen = {level: collections.Counter() for level in list(LEVELS) + ["all"]}
    failed = 0
    saturating = check_models.ort_saturates_u8s8()
    for name, source, third_party in models:
        float_source = (os.path.join(out, "source", f"{name.rsplit('_', 1)[0]}.onnx")
                        if saturating and name in CONVERSIONS else None)
        model = onnx.load(source)
        feeds = (check_models.make_inputs(model, np.random.default_rng(0))
                 if third_party or name in SMALL_VOCABULARY else check_deployed.feeds_for(model, 0))
        tolerance = TOLERANCE.get(name.rsplit("_", 1)[-1], FLOAT_TOLERANCE)
        for level, value in LEVELS.items():
            path = os.path.join(out, f"{name}_{level}.onnx")
            try:
                optimize(source, path, value)
                ops = ops_of(path)
                seen[level].update(ops)
                with tempfile.TemporaryDirectory() as work:
                    worst, problem = check(path, feeds, tolerance, work, float_source)
            except Exception as e:  # onnx and onnxruntime raise their own error types
                ops, worst, problem = collections.Counter(), None, f"{type(e).__name__}: {str(e)[:300]}"
            failed += bool(problem)
            contrib = ", ".join(sorted(op for op in ops if ":" in op)) or "no contrib operators"
            detail = f": {problem}" if problem else f" (max diff/range {worst:.1e})"
            print(f"{'FAIL' if problem else 'ok  '} {name} {level} [{contrib}]{detail}", flush=True)
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "all.onnx")
            try:
                optimize(source, path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
                seen["all"].update(ops_of(path))
            except Exception as e:  # noqa: BLE001 - listed only
                print(f"note {name}: onnxruntime could not save it at ENABLE_ALL: {e}")
    for level, ops in seen.items():
        names = sorted(ops) if level != "all" else sorted(set(ops) - set(seen["extended"]))
        print(f"{level}: {', '.join(names) or '-'}" if level != "all"
              else f"all (not run) adds: {', '.join(names) or '-'}")
    print(f"saved models: {len(models) * len(LEVELS) - failed} of {len(models) * len(LEVELS)} "
          "match onnxruntime and verify")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
