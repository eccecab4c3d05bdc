#!/usr/bin/env python3
"""onnxruntime's Gather / GatherElements / GatherND against the rewritten model, case by case.

For every workload of the shared `cases.py` (same seed and draw order as `ort_gather.py`, so the
inputs are identical to the ones the onnxruntime baseline was recorded with), this script

1. builds the one-node ONNX model and its inputs and writes them as a test directory
   (`WORK/<case>/model.onnx`, `test_data_set_0/input_K.pb`, `output_0.pb` = onnxruntime's output);
2. runs `multigather rewrite` on it;
3. for each thread count: times onnxruntime's op in-process (`intra_op_num_threads = T`), times
   `multigather run REWRITTEN --inputs DIR --repeat N --threads T --json` on the same inputs,
   checks that multigather's output equals onnxruntime's bit for bit, and times a memcpy of a
   buffer the size of the output (the better of one thread and T threads copying one chunk each).
   With `--rounds R` (default 3) the three take turns R times, N runs each turn, and each time
   is the median of its R medians, so that a burst of load on a shared host slows all alike.

When `multigather run` cannot run a rewritten model (an operator of the model the interpreter
does not have yet), the multigather time comes from the timing mode of the `gather` bench
binary instead (`benches/gather.rs --time-case DIR`), which applies the same GatherMultiaxis plan
to the same inputs on a T-thread pool and checks the result against `output_0.pb`; the table marks
such rows with `*`.

Prints one table per thread count: onnxruntime median, multigather median, ratio (ort/mg, above
1 means multigather is faster), memcpy median, and for block cases (gathered rows of at least
256 bytes) multigather's speed as a percentage of the memcpy's.

usage (from the repository root):
    target/ci-venv/bin/python scripts/bench_gather.py [--threads 1,2] [--repeat 20] [--rounds 3]
        [--only CASE] [--cases DIR] [--work DIR] [--multigather BIN] [--bench-bin BIN]

Without --multigather / --bench-bin, the binaries are built with `cargo build --release` and
`cargo bench --no-run` (honouring CARGO_TARGET_DIR).
"""
import argparse
import concurrent.futures
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_BYTES = 256


def load_cases(path):
    """The `cases(rng)` function of `path/cases.py`."""
    sys.path.insert(0, os.path.abspath(path))
    try:
        from cases import cases  # noqa: PLC0415 (the path is only known at run time)
    finally:
        sys.path.pop(0)
    return cases


def model_for(op, attrs, dtype, dshape, ishape):
    """The one-node model, built exactly as `ort_gather.py` builds it."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["data", "indices"], ["output"], **attrs)
    g = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info("data", et, dshape),
            helper.make_tensor_value_info("indices", TensorProto.INT64, ishape),
        ],
        [helper.make_tensor_value_info("output", et, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def row_bytes(op, attrs, data, idx):
    """Bytes per gathered contiguous row: what one index (tuple) selects."""
    if op == "Gather":
        inner = data.shape[attrs.get("axis", 0) % data.ndim + 1:]
    elif op == "GatherND":
        inner = data.shape[attrs.get("batch_dims", 0) + idx.shape[-1]:]
    else:
        inner = ()
    return int(np.prod(inner, dtype=np.int64)) * data.itemsize


def median_time(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def memcpy_time(nbytes, threads, repeat):
    """Median time to copy `nbytes` between two warm buffers: one thread, or `threads` threads
    copying one chunk each (numpy releases the GIL while copying), whichever is faster."""
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    best = median_time(lambda: np.copyto(dst, src), repeat)
    if threads > 1:
        bounds = np.linspace(0, nbytes, threads + 1).astype(np.int64)
        parts = [(dst[a:b], src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            def copy():
                list(pool.map(lambda p: np.copyto(p[0], p[1]), parts))
            best = min(best, median_time(copy, repeat))
    return best


def ort_timer(model, feeds, threads):
    """onnxruntime's output, and a function timing `repeat` runs of its session (the median)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out = s.run(None, feeds)[0]
    return (lambda repeat: median_time(lambda: s.run(None, feeds), repeat)), out


def write_case(d, model, data, idx, out):
    sets = os.path.join(d, "test_data_set_0")
    os.makedirs(sets, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for j, (k, v) in enumerate([("data", data), ("indices", idx)]):
        with open(os.path.join(sets, f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    with open(os.path.join(sets, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(out, "output").SerializeToString())


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def mg_time(a, d, threads):
    """multigather's median over `a.repeat` runs, and whether `multigather run` measured it."""
    sets = os.path.join(d, "test_data_set_0")
    outdir = os.path.join(d, f"mg_out_{threads}")
    if a.kernel:
        return kernel_time(a, d, threads, None), False
    r = run([a.multigather, "run", os.path.join(d, "rewritten.onnx"), "--inputs", sets,
             "--repeat", str(a.repeat), "--threads", str(threads), "--json",
             "--output-dir", outdir])
    if r.returncode == 0:
        timing = json.loads(r.stdout.strip().splitlines()[-1])
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outdir, "output_0.pb")))
        want = numpy_helper.to_array(onnx.load_tensor(os.path.join(sets, "output_0.pb")))
        if got.shape != want.shape or got.tobytes() != want.tobytes():
            sys.exit(f"{d}: multigather's output differs from onnxruntime's")
        return timing["median_s"], True
    return kernel_time(a, d, threads, r.stderr.strip()), False


def kernel_time(a, d, threads, run_error):
    """The median of the bench binary's --time-case mode (which checks the output itself)."""
    r = run([a.bench_bin, "--time-case", d, "--repeat", str(a.repeat), "--threads", str(threads)])
    if r.returncode != 0:
        sys.exit(f"{d}: the timing binary failed ({r.stderr.strip()})"
                 + (f" after multigather run did ({run_error})" if run_error else ""))
    return json.loads(r.stdout.strip().splitlines()[-1])["median_s"]


def cargo(args):
    r = subprocess.run(["cargo", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"cargo {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def binaries(a):
    """Fills in --multigather and --bench-bin by building them in release mode."""
    if not a.multigather:
        cargo(["build", "--release", "--bin", "multigather"])
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        a.multigather = os.path.join(target, "release", "multigather")
    if not a.bench_bin:
        out = cargo(["bench", "--bench", "gather", "--no-run", "--message-format=json"])
        for line in out.splitlines():
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                    and msg["target"]["name"] == "gather":
                a.bench_bin = msg["executable"]
        if not a.bench_bin:
            sys.exit("cargo did not report the gather bench binary")


def ms(s):
    return f"{s * 1e3:.3f}"


def print_table(threads, rows, repeat, rounds):
    print(f"\n## {threads} thread{'s' if threads > 1 else ''} "
          f"(medians of {max(1, rounds)} alternating medians of {repeat} runs, ms)\n")
    head = ["case", "onnxruntime", "multigather", "ort/mg", "memcpy", "mg % of memcpy"]
    lines = [head]
    for r in rows:
        pct = f"{100 * r['memcpy'] / r['mg']:.0f}%" if r["block"] else "-"
        mark = "" if r["via_run"] else " *"
        lines.append([r["case"], ms(r["ort"]), ms(r["mg"]) + mark, f"{r['ort'] / r['mg']:.2f}x",
                      ms(r["memcpy"]), pct])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for k, line in enumerate(lines):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if not all(r["via_run"] for r in rows):
        print("\n* timed by the bench binary's --time-case mode"
              + (" (--kernel)" if all(not r["via_run"] for r in rows) else
                 ": `multigather run` cannot run this rewritten model yet"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="/work/shared/bench", help="directory holding cases.py")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}",
                    help="comma-separated thread counts (default: 1 and all cores)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3,
                    help="turns onnxruntime, multigather and the memcpy take (each time is the "
                         "median of its round medians)")
    ap.add_argument("--only", action="append", help="run only this case (repeatable)")
    ap.add_argument("--work", help="where to write the test directories (default: a temp dir)")
    ap.add_argument("--kernel", action="store_true",
                    help="time every case with the bench binary's --time-case mode (the "
                         "GatherMultiaxis call alone), not with multigather run")
    ap.add_argument("--multigather", help="the multigather binary (default: build it)")
    ap.add_argument("--bench-bin", help="the gather bench binary (default: build it)")
    a = ap.parse_args()
    thread_counts = sorted({int(t) for t in a.threads.split(",")})
    binaries(a)
    work = a.work or tempfile.mkdtemp(prefix="bench_gather_")
    print(f"multigather: {a.multigather}\nbench binary: {a.bench_bin}\ncases: {a.cases}/cases.py, "
          f"test directories: {work}", flush=True)

    rng = np.random.default_rng(7)
    results = {t: [] for t in thread_counts}
    for name, op, attrs, dtype, dshape, idx in load_cases(a.cases)(rng):
        # Draw every case's data, selected or not, so the inputs are those of ort_gather.py.
        data = (rng.standard_normal(dshape) * 100).astype(dtype)
        if a.only and name not in a.only:
            continue
        model = model_for(op, attrs, dtype, dshape, idx.shape)
        feeds = {"data": data, "indices": idx}
        d = os.path.join(work, name)
        rewritten = os.path.join(d, "rewritten.onnx")
        block = row_bytes(op, attrs, data, idx) >= BLOCK_BYTES
        for t in thread_counts:
            ort_time, out = ort_timer(model, feeds, t)
            if not os.path.exists(rewritten):
                write_case(d, model, data, idx, out)
                r = run([a.multigather, "rewrite", os.path.join(d, "model.onnx"), "-o", rewritten])
                if r.returncode != 0:
                    sys.exit(f"{name}: multigather rewrite failed: {r.stderr.strip()}")
            rounds = []
            for _ in range(max(1, a.rounds)):
                mg_s, via_run = mg_time(a, d, t)
                rounds.append((ort_time(a.repeat), mg_s, memcpy_time(out.nbytes, t, a.repeat)))
            ort_s, mg_s, copy_s = (float(np.median([r[k] for r in rounds])) for k in range(3))
            results[t].append({"case": name, "ort": ort_s, "mg": mg_s, "memcpy": copy_s,
                               "block": block, "via_run": via_run})
            print(f"{name} threads={t}: ort {ms(ort_s)} ms, multigather {ms(mg_s)} ms"
                  f"{'' if via_run else ' (kernel)'}, memcpy {ms(copy_s)} ms",
                  file=sys.stderr, flush=True)
    for t in thread_counts:
        print_table(t, results[t], a.repeat, a.rounds)


if __name__ == "__main__":
    main()
