"""Crafted models for the places a gather rewrite can go wrong on a valid model, shared by
check_rewrites.py (the rewrite) and check_onnxruntime.py (the lowering and function bodies).

Each case is a valid model (onnx.checker.check_model(full_check=True) accepts it unless
`checked=False` says why not) with inputs that onnxruntime runs, and what the rewrite must do:
`left` ONNX gathers may stay (skipped with a reason), or `invalid=True`: the model is broken and
`multigather rewrite` must exit 2 naming the node and write nothing (while `inspect` prints it).

- a name shadowed in a subgraph (a Loop body's formal parameter; onnx and onnxruntime refuse a
  node output named like an outer value, so formal parameters are the only shadowing);
- a model-local function called with different ranks (in both file orders, through another
  function), one called consistently through two levels, and a local function named `Gather`;
- several gathers inside one local function, importing the model's opset or an older one;
- declarations that are not proof (an input overriding an initializer, a wrong value_info);
- Gather at every opset 1-13, in IR 3 (initializers must be inputs) and current IR, with float and
  integer data and scalar, vector and matrix indices; GatherElements and GatherND at 11-13;
- GatherND whose index depth is a dim_param: in the main graph, an If branch and a function;
- invalid nodes (Gather axis out of range, GatherND deeper than the data).
"""
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


@dataclass
class Crafted:
    name: str
    model: onnx.ModelProto
    feeds: dict
    left: int = 0            # ONNX gathers the rewrite must leave (skipped, with a reason)
    invalid: bool = False    # rewrite must exit 2
    checked: bool = True     # the original passes onnx.checker
    # onnxruntime and multigather read the original the same way (not so for a local function
    # of the default domain: onnxruntime runs the standard op, multigather calls the function;
    # the rewrite leaves such a node alone, right for either reading)
    same_reading: bool = True
    notes: list = field(default_factory=list)


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def model(graph, opset, ir=None, functions=(), domains=()):
    imports = [h.make_opsetid("", opset)] + [h.make_opsetid(d, 1) for d in domains]
    kw = {"opset_imports": imports, "functions": list(functions)}
    m = h.make_model(graph, **kw)
    m.ir_version = ir if ir is not None else min(m.ir_version, 8 if opset < 19 else m.ir_version)
    return m


def arange(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def shadowing():
    # A Loop body's formal parameter `x` (int64, no shape) shadows the outer float[2,3,4] `x`.
    body = h.make_graph(
        [h.make_node("Gather", ["x", "first"], ["y"], name="gather_in_body", axis=0),
         h.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("x", T.INT64, None)],
        [vi("c_out", T.BOOL, []), vi("y", T.INT64, None)],
        [nh.from_array(np.array([0], np.int64), "first")])
    g = h.make_graph(
        [h.make_node("Shape", ["x"], ["s"], name="shape"),
         h.make_node("Loop", ["trips", "", "s"], ["r"], name="loop", body=body),
         h.make_node("Gather", ["x", "pick"], ["z"], name="gather_outer", axis=2)],
        "main", [vi("x", T.FLOAT, [2, 3, 4]), vi("pick", T.INT64, [2])],
        [vi("r", T.INT64, ["n"]), vi("z", T.FLOAT, [2, 3, 2])],
        [nh.from_array(np.array(2, np.int64), "trips")])
    yield Crafted("shadowed_loop_input", model(g, 13),
                  {"x": arange([2, 3, 4]), "pick": np.array([3, 0], np.int64)})


def functions():
    f2 = h.make_function("local", "f2", ["a"], ["b"],
                         [h.make_node("Constant", [], ["idx"], value=nh.from_array(np.array([1, 0], np.int64))),
                          h.make_node("Gather", ["a", "idx"], ["b"], name="gather_in_f2", axis=1)],
                         [h.make_opsetid("", 13)])
    f1 = h.make_function("local", "f1", ["a"], ["b"], [h.make_node("f2", ["a"], ["b"], domain="local")],
                         [h.make_opsetid("", 13), h.make_opsetid("local", 1)])
    g = h.make_graph(
        [h.make_node("f2", ["x2"], ["y2"], domain="local", name="call_f2"),
         h.make_node("f1", ["x3"], ["y3"], domain="local", name="call_f1")],
        "main", [vi("x2", T.FLOAT, [3, 4]), vi("x3", T.FLOAT, [2, 3, 4])],
        [vi("y2", T.FLOAT, [3, 2]), vi("y3", T.FLOAT, [2, 2, 4])])
    feeds = {"x2": arange([3, 4]), "x3": arange([2, 3, 4])}
    for order, name in (([f2, f1], "function_ranks_differ_callee_first"),
                        ([f1, f2], "function_ranks_differ_caller_first")):
        yield Crafted(name, model(g, 13, functions=order, domains=["local"]), feeds, left=1)
    # Consistent ranks through two levels of calls, callee listed first.
    g = h.make_graph(
        [h.make_node("f2", ["x2"], ["y2"], domain="local", name="call_f2"),
         h.make_node("f1", ["x3"], ["y3"], domain="local", name="call_f1")],
        "main", [vi("x2", T.FLOAT, [3, 4]), vi("x3", T.FLOAT, [5, 4])],
        [vi("y2", T.FLOAT, [3, 2]), vi("y3", T.FLOAT, [5, 2])])
    yield Crafted("function_two_levels_consistent", model(g, 13, functions=[f2, f1], domains=["local"]),
                  {"x2": arange([3, 4]), "x3": arange([5, 4])})
    # A local function named like the standard op is called, not rewritten.
    fake = h.make_function("", "Gather", ["a", "i"], ["b"], [h.make_node("Neg", ["a"], ["b"])],
                           [h.make_opsetid("", 13)])
    g = h.make_graph([h.make_node("Gather", ["x", "i"], ["y"], name="calls_local_gather")], "main",
                     [vi("x", T.FLOAT, [3, 4]), vi("i", T.INT64, [2])], [vi("y", T.FLOAT, [3, 4])])
    yield Crafted("local_function_named_gather", model(g, 13, functions=[fake]),
                  {"x": arange([3, 4]), "i": np.array([0, 1], np.int64)}, left=1, checked=False,
                  same_reading=False,
                  notes=["the checker refuses a function without a domain"])
    yield from gathers_in_a_function()


def gathers_in_a_function():
    # Three lowerings inside one local function (onnxruntime resolves the calls of a function
    # body by name alone), and the same function importing opset 11 in an opset-18 model with
    # a symbolic index count (onnxruntime checks an inlined body at the model's opset).
    for fn_opset, dims in ((18, [3, 4]), (11, ["n", 4])):
        blocks = h.make_function(
            "local", "blocks", ["X", "I", "J"], ["Y", "Z", "W"],
            [h.make_node("Gather", ["X", "I"], ["Y"], axis=1),
             h.make_node("GatherElements", ["X", "J"], ["Z"], axis=0),
             h.make_node("Gather", ["X", "I"], ["W"], axis=0)],
            [h.make_opsetid("", fn_opset)])
        g = h.make_graph(
            [h.make_node("blocks", ["x", "i", "j"], ["y", "z", "w"], domain="local", name="call")],
            "main", [vi("x", T.FLOAT, dims), vi("i", T.INT64, [2]), vi("j", T.INT64, [2, 4])],
            [vi("y", T.FLOAT, [dims[0], 2]), vi("z", T.FLOAT, [2, 4]), vi("w", T.FLOAT, [2, 4])])
        feeds = {"x": arange([3, 4]), "i": np.array([2, -1], np.int64),
                 "j": np.array([[0, 2, 1, 0], [2, 2, -3, 1]], np.int64)}
        notes = [] if fn_opset == 18 else [
            "the checker refuses a function importing another opset than the model's"]
        yield Crafted(f"gathers_in_a_function_at_opset_{fn_opset}_of_18",
                      model(g, 18, functions=[blocks], domains=["local"]), feeds,
                      checked=fn_opset == 18, notes=notes)


def declarations():
    g = h.make_graph([h.make_node("Gather", ["w", "i"], ["y"], name="gather_overridable", axis=1)], "main",
                     [vi("w", T.FLOAT, None), vi("i", T.INT64, [2])], [vi("y", T.FLOAT, [2, 2, 5])],
                     [nh.from_array(np.zeros((4, 3), np.float32), "w")])
    yield Crafted("input_overrides_initializer", model(g, 13),
                  {"w": arange([2, 3, 5]), "i": np.array([1, 0], np.int64)}, left=1, checked=False,
                  notes=["the checker wants a shape on every main-graph input"])
    g = h.make_graph(
        [h.make_node("Reshape", ["x", "shp"], ["r"], name="reshape"),
         h.make_node("Gather", ["r", "i"], ["y"], name="gather_after_reshape", axis=1)], "main",
        [vi("x", T.FLOAT, [2, 6]), vi("i", T.INT64, [2])], [vi("y", T.FLOAT, [3, 2])],
        [nh.from_array(np.array([3, 4], np.int64), "shp")],
        value_info=[vi("r", T.FLOAT, [3, 2, 2])])
    yield Crafted("value_info_claims_wrong_rank", model(g, 13),
                  {"x": arange([2, 6]), "i": np.array([3, 1], np.int64)}, checked=False,
                  notes=["the checker's shape inference refuses the wrong value_info"])


def old_opsets():
    for opset in range(1, 14):
        for ir in (3, None):
            for elem, dtype in ((T.FLOAT, np.float32), (T.INT64, np.int64)):
                for idx_shape, idx in (([], np.array(2, np.int64)), ([2], np.array([3, 0], np.int64)),
                                       ([2, 2], np.array([[0, 1], [3, 2]], np.int64))):
                    nodes = [h.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)]
                    out = [3] + idx_shape
                    g = h.make_graph(nodes, "main", [vi("x", elem, [3, 4]), vi("i", T.INT64, idx_shape)],
                                     [vi("y", elem, out)])
                    m = model(g, opset, ir=3 if ir == 3 else 7)
                    name = f"gather_opset{opset}_ir{m.ir_version}_{T.DataType.Name(elem).lower()}_indices{len(idx_shape)}d"
                    yield Crafted(name, m, {"x": arange([3, 4], dtype), "i": idx})
    for opset in (11, 12, 13):
        g = h.make_graph([h.make_node("GatherElements", ["x", "i"], ["y"], name="elements", axis=1)], "main",
                         [vi("x", T.FLOAT, [3, 4]), vi("i", T.INT64, [2, 2])], [vi("y", T.FLOAT, [2, 2])])
        yield Crafted(f"gather_elements_opset{opset}", model(g, opset),
                      {"x": arange([3, 4]), "i": np.array([[0, 3], [1, 2]], np.int64)})
        attrs = {"batch_dims": 1} if opset >= 12 else {}
        ind = np.array([[[1], [0]], [[2], [1]]], np.int64) if attrs else np.array([[1, 2], [0, 1]], np.int64)
        shape = [2, 2, 1] if attrs else [2, 2]
        g = h.make_graph([h.make_node("GatherND", ["x", "i"], ["y"], name="nd", **attrs)], "main",
                         [vi("x", T.FLOAT, [2, 3, 4]), vi("i", T.INT64, shape)],
                         [vi("y", T.FLOAT, [2, 2, 4] if attrs else [2, 4])])
        yield Crafted(f"gathernd_opset{opset}", model(g, opset), {"x": arange([2, 3, 4]), "i": ind})


def symbolic_depth():
    x = np.arange(2 * 3 * 3, dtype=np.float64).reshape(2, 3, 3)
    feeds = {1: np.array([[[2], [0]], [[1], [1]]], np.int64), 2: np.array([[[2, 1], [0, 0]], [[1, 2], [2, 2]]], np.int64)}
    nd = h.make_node("GatherND", ["x", "i"], ["y"], name="nd_symbolic_depth", batch_dims=1)
    # The output's rank depends on the depth; it is declared for depth 2 (a runtime does not
    # hold a model to its output declarations).
    out = [vi("y", T.DOUBLE, ["i0", "i1"])]
    g = h.make_graph([nd], "main", [vi("x", T.DOUBLE, ["d0", 3, 3]), vi("i", T.INT64, ["i0", "i1", "depth"])],
                     out)
    for k, ind in feeds.items():
        yield Crafted(f"gathernd_symbolic_depth_{k}", model(g, 13), {"x": x, "i": ind})
    # In an If branch.
    then = h.make_graph([h.make_node("GatherND", ["x", "i"], ["t"], name="nd_in_branch", batch_dims=1)],
                        "then", [], [vi("t", T.DOUBLE, None)])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", T.DOUBLE, None)])
    # (Branch outputs may leave their shape out; the main graph's may not.)
    g = h.make_graph([h.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other)],
                     "main", [vi("cond", T.BOOL, []), vi("x", T.DOUBLE, ["d0", 3, 3]),
                              vi("i", T.INT64, ["i0", "i1", "depth"])], out)
    for k, ind in feeds.items():
        yield Crafted(f"gathernd_symbolic_depth_in_if_{k}", model(g, 13),
                      {"cond": np.array(True), "x": x, "i": ind})
    # In a function.
    f = h.make_function("local", "pick", ["a", "b"], ["c"],
                        [h.make_node("GatherND", ["a", "b"], ["c"], name="nd_in_function", batch_dims=1)],
                        [h.make_opsetid("", 13)])
    g = h.make_graph([h.make_node("pick", ["x", "i"], ["y"], domain="local", name="call")], "main",
                     [vi("x", T.DOUBLE, ["d0", 3, 3]), vi("i", T.INT64, ["i0", "i1", "depth"])],
                     out)
    for k, ind in feeds.items():
        yield Crafted(f"gathernd_symbolic_depth_in_function_{k}", model(g, 13, functions=[f], domains=["local"]),
                      {"x": x, "i": ind})


def invalid():
    g = h.make_graph([h.make_node("Gather", ["x", "i"], ["y"], name="bad_axis", axis=7)], "main",
                     [vi("x", T.FLOAT, [3, 4]), vi("i", T.INT64, [2])], [vi("y", T.FLOAT, [3, 2])])
    yield Crafted("invalid_gather_axis", model(g, 13), {}, invalid=True, checked=False)
    g = h.make_graph([h.make_node("GatherND", ["x", "i"], ["y"], name="too_deep")], "main",
                     [vi("x", T.FLOAT, [3, 4]), vi("i", T.INT64, [2, 3])], [vi("y", T.FLOAT, [2])])
    yield Crafted("invalid_gathernd_depth", model(g, 13), {}, invalid=True, checked=False)


def cases():
    for family in (shadowing, functions, declarations, old_opsets, symbolic_depth, invalid):
        yield from family()
