"""Runs the scikit-learn pipelines written by scripts/make_sklearn.py in multigather and
onnxruntime: every output must agree (labels exactly, scores within rtol 1e-5), and
`multigather verify` of each model (rewrite in memory, both runs compared bit for bit) must pass.

usage: python scripts/check_sklearn.py DIR
       (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary, default
       target/release/multigather)

ZipMap outputs (a list of maps in onnxruntime) are compared in the order of the node's class
labels: multigather writes them as the [N, C] tensor of the map values (see the ai.onnx.ml
module note in src/ops/ml/mod.rs).
"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
RTOL, ATOL = 1e-5, 1e-6
ort.set_default_logger_severity(3)


def zipmap_labels(model):
    """The class labels of each ZipMap output, by output name."""
    labels = {}
    for n in model.graph.node:
        if n.op_type == "ZipMap":
            for a in n.attribute:
                if a.name in ("classlabels_int64s", "classlabels_strings"):
                    labels[n.output[0]] = list(onnx.helper.get_attribute_value(a))
    return labels


def as_array(value, keys):
    """onnxruntime's output as an array; a list of maps becomes [N, C] in key order."""
    if isinstance(value, list):
        return np.array([[m[k.decode() if isinstance(k, bytes) else k] for k in keys]
                         for m in value], dtype=np.float32)
    return np.asarray(value)


def check(path, work):
    model = onnx.load(path)
    feeds = dict(np.load(path[:-5] + ".npz", allow_pickle=False))
    feeds = {k: (v.astype(object) if v.dtype.kind == "U" else v) for k, v in feeds.items()}
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs)
    for name, value in feeds.items():
        with open(os.path.join(inputs, f"{name}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(value), name).SerializeToString())
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    keys = zipmap_labels(model)
    outdir = os.path.join(work, "outputs")
    subprocess.run([BIN, "run", path, "--inputs", inputs, "--output-dir", outdir],
                   check=True, capture_output=True, text=True)
    worst = 0.0
    for k, (out, want) in enumerate(zip(model.graph.output, expected)):
        want = as_array(want, keys.get(out.name, []))
        t = onnx.TensorProto()
        with open(os.path.join(outdir, f"output_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        got = numpy_helper.to_array(t)
        if got.dtype.kind in "SO":
            got = got.astype(str)
            want = want.astype(str)
        if got.shape != want.shape:
            return f"output {out.name}: shape {got.shape} != onnxruntime's {want.shape}", 0
        if np.issubdtype(want.dtype, np.floating):
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                diff = np.max(np.abs(got.astype(np.float64) - want))
                return f"output {out.name}: max |diff| {diff:.3g} vs onnxruntime", 0
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want),
                                            initial=0.0)))
        elif not np.array_equal(got, want):
            bad = int(np.sum(got != want))
            return f"output {out.name}: {bad} elements differ from onnxruntime", 0
    subprocess.run([BIN, "verify", path, "--inputs", inputs], check=True, capture_output=True)
    return None, worst


def main():
    models = sorted(glob.glob(os.path.join(sys.argv[1], "*.onnx")))
    failed = 0
    for path in models:
        with tempfile.TemporaryDirectory() as work:
            try:
                problem, worst = check(path, work)
            except subprocess.CalledProcessError as e:
                problem = (e.stderr or "").strip() or str(e)
            except Exception as e:  # onnx and onnxruntime raise their own error types
                problem = f"{type(e).__name__}: {str(e)[:300]}"
        name = os.path.basename(path)
        if problem:
            failed += 1
            print(f"FAIL {name}: {problem}")
        else:
            print(f"ok   {name:<32} max |diff| {worst:.3g}")
    print(f"scikit-learn models: {len(models) - failed} of {len(models)} match onnxruntime "
          f"(rtol {RTOL}) and verify")
    sys.exit(1 if failed or not models else 0)


if __name__ == "__main__":
    main()
