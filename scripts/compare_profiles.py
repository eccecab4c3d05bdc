"""Where a model's time goes, node group by node group, in multigather and in onnxruntime: the
per-node profiles of both engines on the same inputs, at one thread, grouped by operator and,
for convolutions, by shape (input channels and plane, weights, stride), so a gap between the
engines can be traced to the shapes that make it.

usage: python scripts/compare_profiles.py MODEL INPUTS_DIR [--repeat N] [--threads T]
       (needs onnx, onnxruntime; MULTIGATHER = the binary, default target/release/multigather)

INPUTS_DIR holds one TensorProto `.pb` per graph input, as `multigather run --inputs` reads
them (the directories `scripts/check_deployed.py` writes do). Onnxruntime runs with its default
optimisations, so its fused nodes (`..._nchwc`, `..._token_N`, a convolution with its
normalisation and activation) are charged to the convolution they start from; the totals
therefore compare a fused plan with ours, as a user sees them. Its profiler adds a little per
node, so compare ratios between groups rather than against the engines' whole-run medians.
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import onnx
import onnxruntime as ort
from onnx import numpy_helper, shape_inference

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
CONVS = ("Conv", "QLinearConv", "ConvInteger")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("inputs")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    model = shape_inference.infer_shapes(onnx.load(args.model))
    graph = model.graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
    dims.update({t.name: list(t.dims) for t in graph.initializer})
    nodes = {n.name: n for n in graph.node}
    producer = {o: n for n in graph.node for o in n.output}

    def group(node):
        if node.op_type not in CONVS:
            return node.op_type
        w = node.input[3 if node.op_type == "QLinearConv" else 1]
        x = dims.get(node.input[0]) or []
        strides = [list(a.ints) for a in node.attribute if a.name == "strides"]
        stride = strides[0][0] if strides and strides[0] else 1
        return f"{node.op_type} x{x[1:]} w{dims.get(w)} s{stride}"

    def original(name):
        # onnxruntime names a rewritten node after the node (`_token_N`) or the output
        # (`_nchwc`) it came from; a fused chain is charged to its first convolution.
        base = re.sub(r"(_token_\d+|_nchwc)$", "", name)
        if base in nodes:
            return nodes[base]
        for tensor in (base, base.removesuffix("_out")):
            n, hops = producer.get(tensor), 0
            while n is not None and hops < 6:
                if n.op_type in CONVS:
                    return n
                n, hops = producer.get(n.input[0]) if n.input else None, hops + 1
        return None

    ours = collections.defaultdict(float)
    count = collections.Counter()
    run = subprocess.run([BIN, "run", args.model, "--inputs", args.inputs, "--profile", "--json",
                          "--repeat", str(args.repeat), "--threads", str(args.threads)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"multigather failed: {run.stderr.strip()[-300:]}")
    for entry in json.loads(run.stdout)["profile"]["nodes"]:
        node = nodes.get(entry["node"])
        key = group(node) if node is not None else entry["op_type"]
        ours[key] += entry["ms_per_run"]
        count[key] += 1

    feeds = {}
    for path in sorted(glob.glob(os.path.join(args.inputs, "*.pb"))):
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        feeds[tensor.name] = numpy_helper.to_array(tensor)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    for _ in range(args.repeat):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    durations = collections.defaultdict(list)
    kinds = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            durations[name].append(e["dur"])
            kinds[name] = e["args"].get("op_name", "?")
    theirs = collections.defaultdict(float)
    for name, d in durations.items():
        node = original(name)
        key = group(node) if node is not None else kinds[name]
        theirs[key] += sorted(d)[len(d) // 2] / 1000

    print(f"{'multigather':>11} {'onnxruntime':>11} {'ratio':>6}  nodes  group")
    for key in sorted(set(ours) | set(theirs), key=lambda k: -max(ours[k], theirs[k])):
        ratio = f"{ours[key] / theirs[key]:5.2f}x" if theirs[key] else "     -"
        print(f"{ours[key]:9.3f}ms {theirs[key]:9.3f}ms {ratio} {count[key]:6d}  {key}")
    total = (sum(ours.values()), sum(theirs.values()))
    print(f"{total[0]:9.3f}ms {total[1]:9.3f}ms {total[0] / total[1]:5.2f}x         total")


if __name__ == "__main__":
    main()
