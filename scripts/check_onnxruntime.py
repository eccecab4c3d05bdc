"""Proves `multigather lower` in onnxruntime: the lowered models compute bit for bit what the
originals compute.

usage: python scripts/check_onnxruntime.py [DIR ...]
       (needs onnx, onnxruntime, numpy; MULTIGATHER = the binary, default target/release/multigather)

1. Every fixture (fixtures/*/model.onnx) and every test directory given on the command line (a
   directory holding model.onnx and test_data_set_N/, e.g. the ONNX gather conformance tests, or a
   directory of such directories): run the ORIGINAL in onnxruntime on each data set's inputs;
   `multigather rewrite` it, then `multigather lower` the result; both must pass
   onnx.checker.check_model(full_check=True), the rewrite must leave no ONNX gather and the
   lowering no `multigather` domain anywhere (nodes, opset imports, functions); the LOWERED model
   runs in onnxruntime on the same inputs and every output must be bit-identical (same dtype,
   shape and bytes; NaNs included).
2. Hand-built GatherMultiaxis models for what the rewrite never produces (axes out of order and
   non-contiguous, broadcasting both ways, empty axes, modes zero and clamp, int32 indices,
   symbolic dimensions that broadcast at run time, zero-sized dimensions, subgraphs, functions,
   several opsets): lowered, run in onnxruntime, compared bit for bit with a numpy transcription of
   the operator's definition (`gather_multiaxis` below); cases whose indices are out of range in
   mode error must make onnxruntime fail.
3. The same models through `multigather rewrite --with-function-body`: the GatherMultiaxis nodes
   stay, each with a model-local function holding its lowering; the result must pass the checker
   and run AS IT IS in onnxruntime (which inlines the functions) with the same outputs.

4. The crafted models of `rewrite_cases.py` (shadowed names, functions called with different
   ranks, declarations that are not proof, Gather at opsets 1-13 in IR 3 and later, GatherND of
   symbolic depth in a graph, an If branch and a function): the original runs in onnxruntime;
   rewritten, lowered and rewritten with function bodies, each passes the checker and the lowered
   and function-body models run in onnxruntime bit for bit like the original. Invalid models make
   `rewrite` exit 2 with one line naming the node and no output file, and `inspect` still prints
   them.

Prints one line per model, then a summary; exits 1 on any failure.

The ONNX gather conformance tests in that layout come from the onnx package's node test cases, e.g.
`python scripts/gen_node_tests.py /tmp/node gather`, then
`python scripts/check_onnxruntime.py /tmp/node`.
"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import rewrite_cases

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
ort.set_default_logger_severity(4)  # expected failures are reported here, not logged
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOMAIN = "multigather"
GATHERS = {"Gather", "GatherElements", "GatherND"}


# --- the operator's definition, in numpy --------------------------------------------------------

def gather_multiaxis(x, indices, axes, mode="error"):
    """GatherMultiaxis(x, indices, axes, mode), one output element at a time."""
    r = x.ndim
    if indices.ndim != r:
        raise ValueError("ranks differ")
    axes = [a + r if a < 0 else a for a in axes]
    c = max(len(axes), 1)
    logical = list(indices.shape)
    if r:
        if logical[-1] % c:
            raise ValueError("last dimension not a multiple of the coordinate size")
        logical[-1] //= c
    shape = []
    for d in range(r):
        xd, ld = x.shape[d], logical[d]
        if d in axes or xd == ld or xd == 1:
            shape.append(ld)
        elif ld == 1:
            shape.append(xd)
        else:
            raise ValueError(f"dimension {d} does not broadcast")
    if x.dtype == object:
        out = np.full(shape, "", dtype=object)
    else:
        out = np.zeros(shape, dtype=x.dtype)
    for o in np.ndindex(*shape):
        xc = [0 if x.shape[d] == 1 else o[d] for d in range(r)]
        ic = [0 if logical[d] == 1 else o[d] for d in range(r)]
        if r:
            ic[-1] *= c
        zero = False
        for a in axes:
            v, n = int(indices[tuple(ic)]), x.shape[a]
            w = v + n if v < 0 else v
            if 0 <= w < n:
                xc[a] = w
            elif mode == "zero":
                zero = True
            elif mode == "clamp" and n > 0:
                xc[a] = 0 if w < 0 else n - 1
            else:
                raise IndexError(f"index {v} out of range for axis {a} of size {n}")
            ic[-1] += 1
        if not zero:
            out[o] = x[tuple(xc)]
    return out


def output_shape(x_shape, i_shape, axes):
    """The operator's shape function (sizes only)."""
    return list(gather_multiaxis(np.zeros(x_shape, np.int8), np.zeros(i_shape, np.int64), axes, "zero").shape)


# --- model helpers --------------------------------------------------------------------------------

def all_graphs(model):
    def walk(g):
        yield g
        for n in g.node:
            for a in n.attribute:
                for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                    yield from walk(sub)
    yield from walk(model.graph)
    for f in model.functions:
        yield f


def count_ops(model, pred):
    return sum(1 for g in all_graphs(model) for n in g.node if pred(n))


def multigather_left(model):
    """Where the multigather domain still appears, or None."""
    if any(o.domain == DOMAIN for o in model.opset_import):
        return "the model imports the multigather domain"
    for f in model.functions:
        if f.domain == DOMAIN or any(o.domain == DOMAIN for o in f.opset_import):
            return f"function {f.domain}.{f.name} uses the multigather domain"
    n = count_ops(model, lambda n: n.domain == DOMAIN)
    return f"{n} multigather node(s) left" if n else None


def op_summary(model):
    counts = {}
    for g in all_graphs(model):
        for n in g.node:
            if n.op_type in GATHERS or n.op_type in ("Expand", "Transpose", "Where", "And", "Pad", "Identity"):
                counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return ",".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(counts.items())) or "-"


def run_cli(*args):
    subprocess.run([BIN, *args], check=True, capture_output=True)


def session(path_or_model):
    data = path_or_model if isinstance(path_or_model, str) else path_or_model.SerializeToString()
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def same(got, want):
    """Bit-identical: dtype, shape and every element's bytes (strings by value)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.dtype == object:
        return None if np.array_equal(got, want) else "values differ"
    if np.issubdtype(want.dtype, np.floating) and not np.array_equal(got, want, equal_nan=True):
        return "values differ"
    return None if got.tobytes() == want.tobytes() else "bits differ"


def lower_file(src, work):
    """`multigather lower` src into work; checks the result; returns the lowered model."""
    lowered_path = os.path.join(work, "lowered.onnx")
    run_cli("lower", src, "-o", lowered_path)
    lowered = onnx.load(lowered_path)
    onnx.checker.check_model(lowered, full_check=True)
    left = multigather_left(lowered)
    if left:
        raise AssertionError(f"after lowering: {left}")
    return lowered_path, lowered


# --- 1. fixtures and ONNX test directories: original vs rewritten-then-lowered ---------------------

def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def data_sets(test_dir, model):
    inits = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    sets = sorted(glob.glob(os.path.join(test_dir, "test_data_set_*")))
    for d in sets:
        feeds = {}
        for k, name in enumerate(names):
            p = os.path.join(d, f"input_{k}.pb")
            if os.path.exists(p):
                feeds[name] = read_pb(p)
        yield os.path.basename(d), feeds


def with_function_body(src, work):
    """`multigather rewrite --with-function-body` src; checks the result; returns its path."""
    out = os.path.join(work, "with_functions.onnx")
    run_cli("rewrite", src, "-o", out, "--with-function-body")
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    defined = {(f.name, f.overload or None) for f in model.functions if f.domain == DOMAIN}
    calls = count_ops(model, lambda n: n.domain == DOMAIN)
    bare = count_ops(model, lambda n: n.domain == DOMAIN and (n.op_type, n.overload or None) not in defined)
    if bare:
        raise AssertionError(f"{bare} of {calls} GatherMultiaxis node(s) without a function body")
    return out


def check_test_dir(test_dir, work):
    path = os.path.join(test_dir, "model.onnx")
    original = onnx.load(path)
    rewritten_path = os.path.join(work, "rewritten.onnx")
    run_cli("rewrite", path, "-o", rewritten_path)
    rewritten = onnx.load(rewritten_path)
    onnx.checker.check_model(rewritten, full_check=True)
    gathers = count_ops(rewritten, lambda n: n.op_type in GATHERS and n.domain in ("", "ai.onnx"))
    if gathers:
        return f"{gathers} ONNX gather(s) left after the rewrite", None
    multi = count_ops(rewritten, lambda n: n.domain == DOMAIN)
    lowered_path, lowered = lower_file(rewritten_path, work)
    functions_path = with_function_body(path, work)
    want_sess = session(path)
    got_sessions = {"lowered": session(lowered_path), "with function bodies": session(functions_path)}
    sets = 0
    for name, feeds in data_sets(test_dir, original):
        want = want_sess.run(None, feeds)
        for what, sess in got_sessions.items():
            got = sess.run(None, feeds)
            for k, (g, w) in enumerate(zip(got, want)):
                problem = same(g, w)
                if problem:
                    return f"{name} output {k} ({what}): {problem}", None
        sets += 1
    if not sets:
        return "no test_data_set_N directory", None
    return None, f"{multi} GatherMultiaxis -> {op_summary(lowered)}, {sets} data set(s), also with function bodies"


def test_dirs(roots):
    dirs = []
    for root in roots:
        if os.path.exists(os.path.join(root, "model.onnx")):
            dirs.append(root)
        else:
            dirs += sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "*", "model.onnx")))
    return dirs


# --- 2. hand-built GatherMultiaxis models ----------------------------------------------------------

NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.DOUBLE: np.float64, T.INT8: np.int8,
      T.INT32: np.int32, T.INT64: np.int64, T.UINT8: np.uint8, T.BOOL: np.bool_, T.STRING: object}


def data(shape, elem, rng):
    n = int(np.prod(shape, dtype=np.int64))
    if elem == T.STRING:
        return np.array([f"s{v}" for v in range(n)], dtype=object).reshape(shape)
    if elem == T.BOOL:
        return rng.integers(0, 2, size=shape).astype(bool)
    if elem in (T.FLOAT, T.FLOAT16, T.DOUBLE):
        x = (np.arange(n) + 0.5).astype(NP[elem]).reshape(shape)
        if n > 2:
            x.flat[1] = -0.0
            x.flat[2] = np.nan
        return x
    return (np.arange(n) % 100).astype(NP[elem]).reshape(shape)


class Case:
    """One GatherMultiaxis node: `x` (shape with ints or names), `indices` (values, or a shape to
    draw from), `axes`, `mode`; `feed_shapes` gives sizes to symbolic dims at run time."""

    def __init__(self, name, x, indices, axes, mode="error", elem=T.FLOAT, index_elem=T.INT64,
                 opset=13, x_decl=None, i_decl=None, wrap=None, fails=False, low=None, high=None):
        self.name, self.x_shape, self.indices, self.axes, self.mode = name, x, indices, axes, mode
        self.elem, self.index_elem, self.opset, self.wrap, self.fails = elem, index_elem, opset, wrap, fails
        self.x_decl, self.i_decl, self.low, self.high = x_decl, i_decl, low, high

    def feeds(self, rng):
        x = data(self.x_shape, self.elem, rng)
        if isinstance(self.indices, np.ndarray):
            ind = self.indices.astype(NP[self.index_elem])
        else:
            # In range (negative ones included) unless the case asks otherwise.
            sizes = [self.x_shape[a] for a in self.axes] or [1]
            c = len(sizes)
            shape = list(self.indices)
            ind = np.empty(shape, dtype=np.int64)
            flat = ind.reshape(-1, c) if ind.size else ind.reshape(0, c)
            for j, n in enumerate(sizes):
                lo = -n if self.low is None else self.low
                hi = n if self.high is None else self.high
                flat[:, j] = rng.integers(lo, hi, size=flat.shape[0]) if flat.shape[0] else 0
            ind = flat.reshape(shape).astype(NP[self.index_elem])
        return x, ind

    def node(self, name, output):
        node = h.make_node("GatherMultiaxis", ["x", "i"], [output], domain=DOMAIN, name=name)
        node.attribute.append(h.make_attribute("axes", list(self.axes), attr_type=onnx.AttributeProto.INTS))
        if self.mode != "error":
            node.attribute.append(h.make_attribute("mode", self.mode))
        return node

    def model(self):
        x_decl = self.x_decl or self.x_shape
        i_decl = self.i_decl or (list(self.indices.shape) if isinstance(self.indices, np.ndarray) else self.indices)
        node = self.node("gma", "y")
        imports = [h.make_opsetid("", self.opset), h.make_opsetid(DOMAIN, 1)]
        functions = []
        if self.wrap == "function":
            f = h.make_function("local", "Pick", ["x", "i"], ["y"], [node],
                                [h.make_opsetid("", self.opset), h.make_opsetid(DOMAIN, 1)])
            functions.append(f)
            node = h.make_node("Pick", ["x", "i"], ["y"], domain="local", name="call")
            imports.append(h.make_opsetid("local", 1))
        nodes = [node]
        inputs = [h.make_tensor_value_info("x", self.elem, x_decl),
                  h.make_tensor_value_info("i", self.index_elem, i_decl)]
        if self.wrap == "if":
            branch = lambda n, out: h.make_graph([n], f"branch_{out}", [], [h.make_tensor_value_info(out, self.elem, None)])
            then_node, else_node = self.node("gma_then", "then_y"), self.node("gma_else", "else_y")
            nodes = [h.make_node("If", ["cond"], ["y"], name="choose",
                                 then_branch=branch(then_node, "then_y"), else_branch=branch(else_node, "else_y"))]
            inputs.append(h.make_tensor_value_info("cond", T.BOOL, []))
        # The output's rank, with sizes where every operand size is declared.
        static = self.x_decl is None and self.i_decl is None
        i_shape = list(self.indices.shape) if isinstance(self.indices, np.ndarray) else self.indices
        out = output_shape(self.x_shape, i_shape, self.axes)
        y = h.make_tensor_value_info("y", self.elem, out if static else [None] * len(out))
        g = h.make_graph(nodes, self.name, inputs, [y])
        ir = 10 if self.opset >= 21 or functions else 8
        return h.make_model(g, opset_imports=imports, ir_version=ir, functions=functions,
                            producer_name="check_onnxruntime")


def cases():
    arr = lambda v: np.array(v, dtype=np.int64)
    S = lambda *n: list(n)
    return [
        # Axes out of order, non-contiguous, with the other dimensions in every role.
        Case("axes_2_0_points", [4, 3, 5], [6, 1, 14], [2, 0]),
        Case("axes_1_0_reversed", [5, 6], [4, 2], [1, 0]),
        Case("axes_0_2_batch_middle", [4, 3, 5], [6, 3, 14], [0, 2]),
        Case("axes_2_0_batch_first", [3, 4, 5], [3, 4, 4], [2, 0]),
        Case("axes_3_1_mixed_roles", [2, 4, 1, 5, 3], [2, 6, 7, 1, 2], [3, 1]),
        Case("axes_0_1_2_all", [2, 3, 4], [5, 1, 3], [0, 1, 2]),
        Case("axes_1_2_fold_free_last_block", [3, 4, 5, 2], [3, 6, 1, 2], [1, 2]),
        # One axis: blocks (broadcast both ways), elements, and both mixed with batch dims.
        Case("blocks_input_broadcasts", [1, 5, 1], [3, 4, 2], [1]),
        Case("blocks_indices_broadcast", [3, 5, 2], [1, 4, 1], [1]),
        Case("blocks_needs_transpose", [1, 2, 5], [3, 1, 4], [2]),
        Case("elements_same_shapes", [3, 5, 2], [3, 4, 2], [1]),
        Case("elements_axis0", [5, 3], [7, 3], [0]),
        Case("nd_batch_index_input", [3, 5, 1, 2], [3, 4, 6, 1], [1]),
        Case("nd_batch_input", [3, 5, 2], [3, 4, 1], [1]),
        # Empty axes: broadcasting only (index values are ignored).
        Case("empty_axes_expand", [3, 1], [1, 4], []),
        Case("empty_axes_identity", [2, 3], [2, 3], []),
        Case("empty_axes_rank0", [], [], []),
        # Modes.
        Case("zero_blocks", [4, 3], [6, 1], [0], mode="zero", low=-7, high=7),
        Case("zero_elements", [3, 5], [3, 4], [1], mode="zero", low=-8, high=8),
        Case("zero_nd_pairs", [4, 3, 5], [6, 1, 14], [2, 0], mode="zero", low=-6, high=6),
        Case("zero_nd_fold_free", [3, 4, 5, 2], [3, 6, 1, 2], [1, 2], mode="zero", low=-6, high=6),
        Case("zero_empty_axis_float", [0, 3], [2, 1], [0], mode="zero", low=-2, high=2),
        Case("zero_strings", [5], [7], [0], mode="zero", elem=T.STRING, low=-8, high=8),
        Case("zero_bool_int32", [2, 4], [2, 5], [1], mode="zero", elem=T.BOOL, index_elem=T.INT32, low=-6, high=6),
        Case("zero_fp16_opset18", [4, 3, 5], [6, 1, 14], [2, 0], mode="zero", elem=T.FLOAT16, opset=18, low=-6, high=6),
        Case("clamp_blocks", [4, 3], [6, 1], [0], mode="clamp", low=-9, high=9),
        Case("clamp_elements_int32", [3, 5], [3, 4], [1], mode="clamp", index_elem=T.INT32, low=-9, high=9),
        Case("clamp_nd_pairs", [4, 3, 5], [6, 1, 14], [2, 0], mode="clamp", low=-9, high=9),
        Case("clamp_opset11_where_form", [4, 3], [6, 1], [0], mode="clamp", opset=11, low=-9, high=9),
        Case("clamp_nd_opset11", [4, 5], [3, 2], [0, 1], mode="clamp", opset=11, low=-9, high=9),
        Case("error_negative_indices", [4, 3], arr([[-4], [-1], [0], [3]]), [0]),
        # Symbolic dimensions, some of which broadcast only at run time.
        Case("symbolic_elements_runtime_broadcast", [1, 5], [3, 2], [1], x_decl=S("n", 5), i_decl=S("m", 2)),
        Case("symbolic_elements_runtime_broadcast_other_way", [3, 5], [1, 2], [1], x_decl=S("n", 5), i_decl=S("m", 2)),
        Case("symbolic_nd_split_and_sizes", [4, 3, 5], [6, 1, 14], [2, 0], mode="zero",
             x_decl=S("a", "b", "c"), i_decl=S("p", 1, "q"), low=-6, high=6),
        Case("symbolic_nd_batch_expand", [1, 4, 5], [3, 2, 2], [1, 2], x_decl=S("n", 4, 5), i_decl=S("m", 2, 2)),
        Case("symbolic_clamp_sizes", [4, 3], [6, 1], [0], mode="clamp", x_decl=S("r", "c"), low=-9, high=9),
        Case("symbolic_empty_axes", [3, 1], [1, 4], [], x_decl=S("a", "b"), i_decl=S("c", "d")),
        Case("symbolic_zero_sized_split", [4, 3], [0, 4], [0, 1], x_decl=S("r", "c"), i_decl=S("n", "m")),
        Case("zero_sized_output", [3, 0], [2, 1], [0]),
        # Data types, opsets, subgraphs and functions.
        Case("int8_opset11_nd", [4, 5], [3, 2], [0, 1], elem=T.INT8, opset=11),
        # (Blocks of one string: onnxruntime 1.31's Gather copies only the first string of each
        # longer block, in the original models too.)
        Case("string_blocks_opset7", [5, 1], [3, 1], [0], elem=T.STRING, opset=7),
        Case("string_nd_batch", [3, 5, 2], [3, 4, 1], [1], elem=T.STRING),
        Case("double_opset21", [4, 3, 5], [6, 3, 14], [0, 2], elem=T.DOUBLE, opset=21),
        Case("in_if_branches", [4, 3, 5], [6, 1, 14], [2, 0], mode="zero", wrap="if", low=-6, high=6),
        Case("in_function", [4, 3, 5], [6, 3, 14], [0, 2], mode="clamp", wrap="function", low=-9, high=9),
        # Out of range in mode error: onnxruntime must refuse, like the definition.
        Case("error_out_of_range_blocks", [4, 3], arr([[0], [4]]), [0], fails=True),
        Case("error_out_of_range_nd", [4, 5], arr([[0, 1], [1, 5]]), [0, 1], fails=True),
    ]


def check_case(case, work, rng):
    src = os.path.join(work, "model.onnx")
    onnx.save(case.model(), src)
    lowered_path, lowered = lower_file(src, work)
    x, ind = case.feeds(rng)
    feeds = {"x": x, "i": ind}
    if case.wrap == "if":
        feeds["cond"] = np.array(True)
    try:
        want = gather_multiaxis(x, ind, case.axes, case.mode)
    except IndexError:
        want = None
    if (want is None) != case.fails:
        return "the numpy definition disagrees with the case's expectation", None
    for what, path in (("lowered", lowered_path), ("with function bodies", with_function_body(src, work))):
        sess = session(path)
        try:
            got = sess.run(None, feeds)[0]
        except Exception as e:  # onnxruntime raises its own error types
            if case.fails:
                continue
            return f"{what}: onnxruntime: {str(e).splitlines()[0][:200]}", None
        if case.fails:
            return f"{what}: onnxruntime accepted an out-of-range index", None
        problem = same(got, want)
        if case.wrap == "if" and not problem:
            got_else = sess.run(None, {**feeds, "cond": np.array(False)})[0]
            problem = same(got_else, want) and f"else branch: {same(got_else, want)}"
        if problem:
            return f"{what}: {problem}", None
    result = "fails as it must" if case.fails else f"output {list(want.shape)}"
    return None, f"{op_summary(lowered)}, {result}, also with function bodies"


# --- 4. crafted models: the rewrite's hard cases --------------------------------------------------

def check_crafted(case, work):
    src = os.path.join(work, "model.onnx")
    onnx.save(case.model, src)
    if case.checked:
        onnx.checker.check_model(case.model, full_check=True)
    if case.invalid:
        out = os.path.join(work, "rewritten.onnx")
        r = subprocess.run([BIN, "rewrite", src, "-o", out], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        node = case.model.graph.node[0].name
        if r.returncode != 2 or len(lines) != 1 or f"'{node}'" not in lines[0]:
            return f"rewrite exited {r.returncode} with {lines!r}; wanted exit 2 and one line naming '{node}'", None
        if os.path.exists(out):
            return "rewrite wrote an output file for an invalid model", None
        run_cli("inspect", src)
        return None, f"refused: {lines[0]}"
    want = session(src).run(None, case.feeds)
    rewritten_path = os.path.join(work, "rewritten.onnx")
    run_cli("rewrite", src, "-o", rewritten_path)
    rewritten = onnx.load(rewritten_path)
    # A model the checker refuses (see the case's notes) cannot give one it accepts: the outputs
    # are checked when the original is.
    check = onnx.checker.check_model if case.checked else (lambda m, full_check: None)
    check(rewritten, full_check=True)
    left = count_ops(rewritten, lambda n: n.op_type in GATHERS and n.domain in ("", "ai.onnx"))
    if left != case.left:
        return f"{left} ONNX gather(s) left after the rewrite, expected {case.left}", None
    lowered_path = os.path.join(work, "lowered.onnx")
    run_cli("lower", rewritten_path, "-o", lowered_path)
    lowered = onnx.load(lowered_path)
    check(lowered, full_check=True)
    functions_path = os.path.join(work, "with_functions.onnx")
    run_cli("rewrite", src, "-o", functions_path, "--with-function-body")
    check(onnx.load(functions_path), full_check=True)
    for what, path in (("lowered", lowered_path), ("with function bodies", functions_path)):
        got = session(path).run(None, case.feeds)
        for k, (g, w) in enumerate(zip(got, want)):
            problem = same(g, w)
            if problem:
                return f"{what} output {k}: {problem}", None
    notes = f" ({'; '.join(case.notes)})" if case.notes else ""
    return None, f"{op_summary(lowered)}, {case.left} left, also with function bodies{notes}"


# --- driver --------------------------------------------------------------------------------------

def main():
    rng = np.random.default_rng(20250219)
    jobs = [(os.path.relpath(d, ROOT) if d.startswith(ROOT) else d, check_test_dir, d)
            for d in test_dirs([os.path.join(ROOT, "fixtures")] + sys.argv[1:])]
    jobs += [(f"hand-built/{c.name}", check_case, c) for c in cases()]
    jobs += [(f"crafted/{c.name}", check_crafted, c) for c in rewrite_cases.cases()]
    failed = 0
    for label, fn, arg in jobs:
        with tempfile.TemporaryDirectory() as work:
            try:
                problem, note = fn(arg, work, rng) if fn is check_case else fn(arg, work)
            except subprocess.CalledProcessError as e:
                problem = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [str(e)]
                problem, note = problem[0], None
            except Exception as e:  # onnx and onnxruntime raise their own error types
                problem, note = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", None
        if problem:
            failed += 1
            print(f"FAIL {label}: {problem}")
        else:
            print(f"ok   {label}: {note}")
    print(f"lowering: {len(jobs) - failed} of {len(jobs)} models check out in onnxruntime")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
