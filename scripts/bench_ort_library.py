"""onnxruntime on the original model vs onnxruntime on the rewritten model with the custom-op
library, on the shared gather benchmark cases, in one process.

usage: python scripts/bench_ort_library.py [--cases DIR] [--threads 1 2] [--repeat N] [--rounds R]
                                          [--only CASE] [--library PATH]

DIR holds `cases.py` (default: the project's shared bench directory, ../shared/bench beside the
repository, or $MULTIGATHER_BENCH_CASES). For each case and thread count: the same inputs go to
both sessions, the outputs must be bit-identical (exit 1 if not), and the table gives the median
run time of each and the speedup (original / rewritten). With `--rounds R` (default 3) the two
sessions take turns R times, N runs each turn, and each time is the median of its R medians, so
that a burst of load on a shared host slows both alike. PATH is the custom-op library to
register (default: `multigather.get_library_path()`; for instance
target/release/libmultigather_ort.so, built by `cargo build --release -p multigather-ort`). Needs the multigather package,
onnxruntime, onnx and numpy.
"""

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import multigather

HERE = os.path.dirname(os.path.abspath(__file__))


def model_for(op, attrs, dtype, dshape, ishape):
    """The case as a one-node model (as the shared baseline script builds it)."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["data", "indices"], ["output"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info("data", et, dshape),
         helper.make_tensor_value_info("indices", TensorProto.INT64, ishape)],
        [helper.make_tensor_value_info("output", et, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def session(model, threads, library):
    """A session on `model` with `threads` intra-op threads, the custom-op `library` registered if given."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if library:
        options.register_custom_ops_library(library)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def median_time(s, feeds, repeat):
    s.run(None, feeds)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        s.run(None, feeds)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    default = os.environ.get("MULTIGATHER_BENCH_CASES", os.path.join(HERE, "..", "..", "shared", "bench"))
    ap.add_argument("--cases", default=default)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only")
    ap.add_argument("--library")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.cases))
    from cases import cases  # noqa: E402 (the shared case list)
    library = a.library or multigather.get_library_path()

    rng = np.random.default_rng(7)
    print(f"onnxruntime {ort.__version__}; median of {a.rounds} alternating medians of {a.repeat} runs; "
          "speedup = original / rewritten")
    print(f"{'case':<24} {'threads':>7} {'original':>11} {'rewritten':>11} {'speedup':>8}  identical")
    all_identical = True
    for name, op, attrs, dtype, dshape, idx in cases(rng):
        if a.only and a.only != name:
            continue
        data = (rng.standard_normal(dshape) * 100).astype(dtype)
        original = model_for(op, attrs, dtype, dshape, idx.shape)
        rewritten = multigather.rewrite(original)
        feeds = {"data": data, "indices": idx}
        for threads in a.threads:
            s0 = session(original, threads, library=None)
            s1 = session(rewritten, threads, library=library)
            want, got = s0.run(None, feeds)[0], s1.run(None, feeds)[0]
            identical = want.shape == got.shape and want.tobytes() == got.tobytes()
            all_identical &= identical
            rounds = [(median_time(s0, feeds, a.repeat), median_time(s1, feeds, a.repeat))
                      for _ in range(max(1, a.rounds))]
            t0, t1 = (float(np.median([r[k] for r in rounds])) for k in (0, 1))
            print(f"{name:<24} {threads:>7} {t0 * 1e3:>8.3f} ms {t1 * 1e3:>8.3f} ms {t0 / t1:>7.2f}x  "
                  f"{'yes' if identical else 'NO'}", flush=True)
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
