"""Cross-checks rewrites against the onnx package and onnxruntime.

usage: python scripts/check_rewrites.py DIR...     (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary)

For every .onnx model under DIR:
  1. `multigather rewrite` it; the result must pass onnx.checker.check_model(full_check=True) and
     contain no Gather / GatherElements / GatherND anywhere;
  2. run the ORIGINAL in onnxruntime and the REWRITTEN model in `multigather run` on the same
     inputs (the model's test_data_set_0 when it has one, else inputs drawn as check_models.py
     draws them); outputs must be bit-identical for integer / gather-only graphs and equal within
     1e-4 relative otherwise (the interpreter and
     onnxruntime may round float arithmetic differently; the rewrite itself is checked bit for bit
     by `multigather verify`);
  3. `multigather verify` it on those inputs: the original and the rewrite run bit-identically,
     and, as the interpreter enforces the operators' type constraints, every node of both takes
     element types its schema allows at the model's opset;
  4. `multigather lower` the rewrite (at the model's own opset): the lowered model must pass the
     full check, hold nothing of the multigather domain, and run in onnxruntime bit-identically
     to the original in onnxruntime.
Then the crafted models of rewrite_cases.py (shadowed names, functions called with different
ranks, declarations that are not proof, Gather at opsets 1-13 in IR 3 and later, GatherND of
symbolic depth): the same checks on their own inputs, with the number of gathers each case
expects to stay (skipped with a reason); invalid models must make `rewrite` exit 2 and write
nothing.
Prints one line per model and exits 1 on any failure.
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

import rewrite_cases
from check_models import make_inputs
from check_sklearn import compare_maps, read_maps

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
GATHERS = {"Gather", "GatherElements", "GatherND"}


def all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from all_nodes(g)


def gathers_left(model):
    nodes = list(all_nodes(model.graph))
    for f in model.functions:
        nodes += list(f.node)
    return sum(1 for n in nodes if n.op_type in GATHERS and n.domain in ("", "ai.onnx"))


def stored_inputs(model_path, model):
    d = os.path.join(os.path.dirname(model_path), "test_data_set_0")
    if not os.path.isdir(d):
        return None
    feeds = {}
    for k, vi in enumerate(model.graph.input):
        p = os.path.join(d, f"input_{k}.pb")
        if os.path.exists(p):
            t = onnx.TensorProto()
            t.ParseFromString(open(p, "rb").read())
            feeds[vi.name] = numpy_helper.to_array(t)
    return feeds


def stored_output(model_path, k):
    """Output `k` as stored next to the model (test_data_set_0/output_K.pb), or None."""
    p = os.path.join(os.path.dirname(model_path), "test_data_set_0", f"output_{k}.pb")
    if not os.path.exists(p):
        return None
    t = onnx.TensorProto()
    t.ParseFromString(open(p, "rb").read())
    return numpy_helper.to_array(t)


def check(path, work, feeds=None, expect_left=0, checked=True, compare=True):
    original = onnx.load(path)
    rewritten_path = os.path.join(work, "rewritten.onnx")
    subprocess.run([BIN, "rewrite", path, "-o", rewritten_path], check=True, capture_output=True)
    rewritten = onnx.load(rewritten_path, load_external_data=False)
    if checked:
        onnx.checker.check_model(rewritten, full_check=True)
    left = gathers_left(rewritten)
    if left != expect_left:
        return f"{left} gather node(s) left after the rewrite, expected {expect_left}"

    if not compare:
        return None
    from_store = False
    if feeds is None:
        feeds = stored_inputs(path, original)
        from_store = bool(feeds)
        feeds = feeds or make_inputs(original, np.random.default_rng(0))
    # One thread: some contrib kernels (DynamicQuantizeLSTM) quantise each thread's share of
    # the batch on its own, so onnxruntime's result depends on its thread count.
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs, exist_ok=True)
    for k, (name, value) in enumerate(feeds.items()):
        with open(os.path.join(inputs, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(value), name).SerializeToString())
    outdir = os.path.join(work, "outputs")
    subprocess.run([BIN, "run", rewritten_path, "--inputs", inputs, "--output-dir", outdir],
                   check=True, capture_output=True)
    # The interpreter enforces the schemas' type constraints, so `verify` also proves that
    # every node of the rewrite takes types its opset allows (as the checker above does).
    r = subprocess.run([BIN, "verify", path, "--inputs", inputs], capture_output=True, text=True)
    if r.returncode != 0:
        return f"verify exited {r.returncode}: {r.stderr.strip()}"
    problem = check_lowered(rewritten_path, work, options, feeds, expected, checked)
    if problem:
        return problem
    for k, want in enumerate(expected):
        if isinstance(want, list):
            # ZipMap's sequence of maps: `run` writes a SequenceProto of MapProtos.
            why, _ = compare_maps(k, read_maps(os.path.join(outdir, f"output_{k}.pb")), want)
            if why:
                return why
            continue
        t = onnx.TensorProto()
        t.ParseFromString(open(os.path.join(outdir, f"output_{k}.pb"), "rb").read())
        got = numpy_helper.to_array(t)
        if got.shape != want.shape:
            return f"output {k}: shape {got.shape} != onnxruntime's {want.shape}"
        if np.issubdtype(want.dtype, np.floating):
            close = lambda a, b: np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
            # onnxruntime's quantised kernels depend on the CPU: on AVX2 without VNNI they
            # multiply u8 by s8 with saturating 16-bit sums (vpmaddubsw, as its quantization
            # docs warn), so there the fixture's outputs, stored by onnxruntime on a CPU
            # without that saturation, are the oracle (DynamicQuantizeLSTM differs by 0.27).
            stored = stored_output(path, k) if from_store else None
            if not close(got, want) and (stored is None or not close(got, stored)):
                return f"output {k}: max |diff| {np.max(np.abs(got - want))} vs onnxruntime"
        elif not np.array_equal(got, want):
            return f"output {k}: differs from onnxruntime"
    return None


def check_lowered(rewritten_path, work, options, feeds, expected, checked):
    """Step 4: the lowered rewrite, in onnxruntime, gives the original's bits."""
    lowered_path = os.path.join(work, "lowered.onnx")
    r = subprocess.run([BIN, "lower", rewritten_path, "-o", lowered_path], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return f"lower exited {r.returncode}: {r.stderr.strip()}"
    lowered = onnx.load(lowered_path, load_external_data=False)
    if checked:
        onnx.checker.check_model(lowered, full_check=True)
    nodes = list(all_nodes(lowered.graph)) + [n for f in lowered.functions for n in f.node]
    if any(n.domain == "multigather" for n in nodes) or any(
            o.domain == "multigather" for o in lowered.opset_import):
        return "the lowered model still uses the multigather domain"
    sess = ort.InferenceSession(lowered_path, options, providers=["CPUExecutionProvider"])
    for k, (want, got) in enumerate(zip(expected, sess.run(None, feeds))):
        if isinstance(want, list):
            same = want == got
        else:
            want, got = np.asarray(want), np.asarray(got)
            same = want.dtype == got.dtype and want.shape == got.shape and (
                # Strings are objects: compared by value, the rest by their bytes.
                np.array_equal(want, got) if want.dtype == object
                else want.tobytes() == got.tobytes())
        if not same:
            return f"output {k}: the lowered model in onnxruntime differs from the original's bits"
    return None


def check_crafted(case, work):
    path = os.path.join(work, "model.onnx")
    onnx.save(case.model, path)
    if case.invalid:
        out = os.path.join(work, "rewritten.onnx")
        r = subprocess.run([BIN, "rewrite", path, "-o", out], capture_output=True)
        if r.returncode != 2 or os.path.exists(out):
            return f"rewrite of an invalid model exited {r.returncode} (wanted 2, no output)"
        return None
    if case.checked:
        onnx.checker.check_model(case.model, full_check=True)
    return check(path, work, case.feeds, case.left, case.checked, case.same_reading)


def main():
    models = []
    for root in sys.argv[1:]:
        models += sorted(glob.glob(os.path.join(root, "**", "*.onnx"), recursive=True))
    jobs = [(path, check, path) for path in models]
    jobs += [(f"crafted/{c.name}", check_crafted, c) for c in rewrite_cases.cases()]
    failed = 0
    for path, fn, arg in jobs:
        with tempfile.TemporaryDirectory() as work:
            try:
                problem = fn(arg, work)
            except subprocess.CalledProcessError as e:
                problem = (e.stderr or b"").decode(errors="replace").strip() or str(e)
            except Exception as e:  # onnx and onnxruntime raise their own error types
                problem = f"{type(e).__name__}: {str(e)[:300]}"
        if problem:
            failed += 1
            print(f"FAIL {path}: {problem}")
        else:
            print(f"ok   {path}")
    print(f"rewrites: {len(jobs) - failed} of {len(jobs)} models check out")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
