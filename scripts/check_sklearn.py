"""Runs the scikit-learn pipelines written by scripts/make_sklearn.py in multigather and
onnxruntime: every output must agree (labels exactly, scores within rtol 1e-5), and
`multigather verify` of each model (rewrite in memory, both runs compared bit for bit) must pass.

usage: python scripts/check_sklearn.py DIR
       (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary, default
       target/release/multigather)

ZipMap outputs are sequences of maps: onnxruntime returns a list of dicts, `multigather run`
writes a SequenceProto of MapProtos (output_K.pb), read back here as a list of dicts; the two
lists must hold as many maps, each with exactly onnxruntime's keys (same key type), and values
within the tolerance. The Python package's `multigather.run` must return that list of dicts
too (when the package is installed).
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


def zipmap_outputs(model):
    """The names of the graph outputs ZipMap nodes produce."""
    return {o for n in model.graph.node if n.op_type == "ZipMap" for o in n.output}


def read_maps(path):
    """A SequenceProto of MapProtos as onnxruntime's list of dicts (str or int keys)."""
    seq = onnx.SequenceProto()
    with open(path, "rb") as f:
        seq.ParseFromString(f.read())
    if seq.elem_type != onnx.SequenceProto.MAP:
        raise ValueError(f"{path}: a sequence of element type {seq.elem_type}, not of maps")
    maps = []
    for m in seq.map_values:
        keys = ([k.decode() for k in m.string_keys] if m.key_type == onnx.TensorProto.STRING
                else [int(k) for k in m.keys])
        values = [float(numpy_helper.to_array(t)) for t in m.values.tensor_values]
        maps.append(dict(zip(keys, values)))
    return maps


def compare_maps(name, got, want):
    """None when two lists of dicts agree (keys exactly, values within tolerance), else why;
    with the largest difference."""
    if not isinstance(got, list) or len(got) != len(want):
        return f"output {name}: {len(got)} maps vs onnxruntime's {len(want)}", 0.0
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if set(g) != set(w) or any(type(a) is not type(b) for a, b in zip(sorted(g), sorted(w))):
            return f"output {name}: map {i} has keys {sorted(g)} vs onnxruntime's {sorted(w)}", 0.0
        gv = np.array([g[k] for k in w], np.float64)
        wv = np.array(list(w.values()), np.float64)
        if not np.allclose(gv, wv, rtol=RTOL, atol=ATOL, equal_nan=True):
            return f"output {name}: map {i} max |diff| {np.max(np.abs(gv - wv)):.3g}", 0.0
        worst = max(worst, float(np.max(np.abs(gv - wv), initial=0.0)))
    return None, worst


def python_package_maps(path, feeds, maps):
    """multigather.run's ZipMap outputs (lists of dicts) vs onnxruntime's; None when the
    package is not installed or they agree."""
    try:
        import multigather
    except ImportError:
        return None
    got = multigather.run(path, feeds)
    for name, want in maps.items():
        problem, _ = compare_maps(name, got[name], want)
        if problem:
            return f"multigather.run: {problem}"
    return None


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
    zipmaps = zipmap_outputs(model)
    outdir = os.path.join(work, "outputs")
    subprocess.run([BIN, "run", path, "--inputs", inputs, "--output-dir", outdir],
                   check=True, capture_output=True, text=True)
    worst = 0.0
    maps = {}
    for k, (out, want) in enumerate(zip(model.graph.output, expected)):
        if out.name in zipmaps:
            maps[out.name] = want
            problem, diff = compare_maps(out.name, read_maps(os.path.join(outdir, f"output_{k}.pb")), want)
            if problem:
                return problem, 0
            worst = max(worst, diff)
            continue
        want = np.asarray(want)
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
    problem = python_package_maps(path, feeds, maps) if maps else None
    if problem:
        return problem, 0
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
