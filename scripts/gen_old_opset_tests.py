"""Writes node tests of operator versions from opsets 1 to 9, in the test-data layout that
`multigather test` runs: OUT/<test>/model.onnx and OUT/<test>/test_data_set_0/{input,output}_K.pb.

usage: python scripts/gen_old_opset_tests.py legacy [OUT]     (OUT: tests/old_opsets/node)
       python scripts/gen_old_opset_tests.py converted OUT [OPSET ...]   (default opsets 6 and 1)

`legacy` writes the hand-built cases of the attributes the current versions dropped (`broadcast`
and `axis` of the binary operators, PRelu's channel slope, `is_test`, `spatial`,
`consumed_inputs`, Reshape-1's `shape`, Slice-1, Pad-2, Split-2, TopK-1, Upsample-7/9, Gemm-6's
`broadcast`). Each expected output is a numpy transcription of that version's specification;
where onnx.reference runs the version, the script requires it to agree (within 1e-6) and says
where it does not run. The set is small and committed: `tests/old_opsets.rs` runs it.

`converted` takes every ONNX backend node test (onnx.backend.test.case.node) down to each
OPSET with onnx.version_converter, where the converter supports it, and keeps the original
expected outputs (a conversion keeps the meaning). The converter has no adapter down from
several recent versions, so a model is first relabelled to the lowest opset (7 or later) at
which onnx's checker accepts it and onnxruntime gives the same outputs (`lowest_same_meaning`). Tests whose converted model fails onnx's
checker are left out. CI writes this set into target/ and runs it (scripts/check_old_opsets.py).
"""
import os
import sys
import warnings

import numpy as np
import onnx
import onnx.backend.test.case.node as node_cases
from onnx import TensorProto, helper, numpy_helper, version_converter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(6)


def write_test(out, name, model, inputs, outputs):
    """One test directory: the model and one data set."""
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    graph = model.graph
    for kind, values, decls in (("input", inputs, graph.input), ("output", outputs, graph.output)):
        for k, value in enumerate(values):
            t = value if isinstance(value, TensorProto) else numpy_helper.from_array(
                np.asarray(value), decls[k].name)
            with open(os.path.join(d, f"test_data_set_0/{kind}_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())


# ---------------------------------------------------------------- hand-built legacy cases

def one_node(op, opset, inputs, outputs, **attrs):
    """A one-node model at `opset` whose inputs and outputs are the given arrays."""
    names = [f"x{i}" for i in range(len(inputs))]
    outs = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op, names, outs, **attrs)
    decl = lambda n, a: helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
    graph = helper.make_graph([node], f"{op.lower()}_{opset}",
                              [decl(n, a) for n, a in zip(names, inputs)],
                              [decl(n, a) for n, a in zip(outs, outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=3)
    return model


def floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def legacy_b(a, b, axis=None):
    """B placed in A's rank by the opset 1-6 broadcast rule (the specification's examples)."""
    if b.size == 1:
        return b.reshape([1] * a.ndim)
    start = a.ndim - b.ndim if axis is None else axis
    assert a.shape[start:start + b.ndim] == b.shape
    return b.reshape([1] * start + list(b.shape) + [1] * (a.ndim - start - b.ndim))


def binary_cases():
    a = floats(2, 3, 4, 5)
    ints_a = RNG.integers(-3, 4, (2, 3, 4)).astype(np.int32)
    bools_a = RNG.integers(0, 2, (2, 3, 4)).astype(bool)
    arith = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
    for op, f in arith.items():
        for opset in (1, 6):
            extra = {"consumed_inputs": [0, 0]} if opset == 1 else {}
            for tag, b, attrs in (
                ("suffix", floats(4, 5), {"broadcast": 1}),
                ("axis1", floats(3, 4), {"broadcast": 1, "axis": 1}),
                ("axis0", floats(2), {"broadcast": 1, "axis": 0}),
                ("scalar", floats(), {"broadcast": 1}),
                ("one", floats(1, 1), {"broadcast": 1}),
                ("same", floats(2, 3, 4, 5), {}),
            ):
                if op == "Div":
                    b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
                y = f(a, legacy_b(a, b, attrs.get("axis"))).astype(np.float32)
                yield (f"{op.lower()}_{opset}_{tag}", op, opset, [a, b], [y], {**attrs, **extra})
    base = np.abs(a) + np.float32(0.5)
    e = floats(5)
    yield ("pow_1_suffix", "Pow", 1, [base, e],
           [np.power(base, legacy_b(base, e)).astype(np.float32)], {"broadcast": 1})
    for op, f in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
        b = RNG.integers(0, 2, (3,)).astype(bool)
        yield (f"{op.lower()}_1_axis1", op, 1, [bools_a, b],
               [f(bools_a, legacy_b(bools_a, b, 1))], {"broadcast": 1, "axis": 1})
    b = RNG.integers(-3, 4, (4,)).astype(np.int32)
    yield ("equal_1_suffix", "Equal", 1, [ints_a, b],
           [np.equal(ints_a, legacy_b(ints_a, b))], {"broadcast": 1})
    for op, f in (("Greater", np.greater), ("Less", np.less)):
        b = floats(3, 4)
        yield (f"{op.lower()}_1_axis1", op, 1, [a, b],
               [f(a, legacy_b(a, b, 1))], {"broadcast": 1, "axis": 1})


def prelu(x, slope):
    return np.where(x < 0, x * slope, x).astype(x.dtype)


def other_cases():
    x = floats(2, 3, 4, 5)
    # PRelu before opset 7: a slope per channel (dim 1), or one shared value.
    slope = floats(3)
    for opset in (1, 6):
        extra = {"consumed_inputs": [0, 0]} if opset == 1 else {}
        yield (f"prelu_{opset}_channel", "PRelu", opset, [x, slope],
               [prelu(x, slope.reshape(3, 1, 1))], extra)
        one = floats(1)
        yield (f"prelu_{opset}_shared", "PRelu", opset, [x, one], [prelu(x, one[0])], extra)
    # BatchNormalization: is_test = 1 (statistics given), is_test = 0 (the batch's), spatial = 0.
    scale, bias, mean = floats(3), floats(3), floats(3)
    var = np.abs(floats(3)) + np.float32(0.5)
    eps = 1e-5
    bc = lambda v: v.reshape(1, 3, 1, 1).astype(np.float64)
    x64 = x.astype(np.float64)
    given = bc(scale) * (x64 - bc(mean)) / np.sqrt(bc(var) + eps) + bc(bias)
    for opset in (1, 6):
        extra = {"consumed_inputs": [0, 0, 0, 1, 1]} if opset == 1 else {}
        yield (f"batchnorm_{opset}_is_test", "BatchNormalization", opset,
               [x, scale, bias, mean, var], [given.astype(np.float32)], {"is_test": 1, **extra})
    bm = x64.mean(axis=(0, 2, 3)).reshape(1, 3, 1, 1)
    bv = x64.var(axis=(0, 2, 3)).reshape(1, 3, 1, 1)
    batch = bc(scale) * (x64 - bm) / np.sqrt(bv + eps) + bc(bias)
    yield ("batchnorm_6_training", "BatchNormalization", 6, [x, scale, bias, mean, var],
           [batch.astype(np.float32)], {})
    s2, b2, m2 = floats(3, 4, 5), floats(3, 4, 5), floats(3, 4, 5)
    v2 = np.abs(floats(3, 4, 5)) + np.float32(0.5)
    y2 = (s2 * (x64 - m2) / np.sqrt(v2.astype(np.float64) + eps) + b2).astype(np.float32)
    yield ("batchnorm_7_spatial0", "BatchNormalization", 7, [x, s2, b2, m2, v2], [y2],
           {"spatial": 0})
    # Dropout in test mode is the identity (its mask has the data's type before opset 10).
    yield ("dropout_6_is_test", "Dropout", 6, [x], [x], {"is_test": 1, "ratio": 0.3})
    yield ("dropout_1_is_test", "Dropout", 1, [x], [x, np.ones_like(x)],
           {"is_test": 1, "consumed_inputs": [0]})
    # Shapes as attributes.
    yield ("reshape_1_shape", "Reshape", 1, [x], [x.reshape(6, 20)], {"shape": [6, -1]})
    yield ("slice_1_axes", "Slice", 1, [x], [x[:, :, 1:3, -4:-1]],
           {"axes": [2, 3], "starts": [1, -4], "ends": [3, -1]})
    yield ("slice_1_no_axes", "Slice", 1, [x], [x[0:1, 1:1000]],
           {"starts": [0, 1], "ends": [1, 1000]})
    m = floats(3, 4)
    yield ("pad_2_constant", "Pad", 2, [m], [np.pad(m, ((1, 0), (2, 3)), constant_values=1.5)],
           {"pads": [1, 2, 0, 3], "value": 1.5})
    yield ("pad_2_edge", "Pad", 2, [m], [np.pad(m, ((0, 2), (1, 0)), mode="edge")],
           {"pads": [0, 1, 2, 0], "mode": "edge"})
    yield ("pad_1_reflect", "Pad", 1, [m], [np.pad(m, ((1, 1), (2, 0)), mode="reflect")],
           {"paddings": [1, 2, 1, 0], "mode": "reflect"})
    v = floats(6, 2)
    yield ("split_2_attr", "Split", 2, [v], [v[:1], v[1:4], v[4:]], {"axis": 0, "split": [1, 3, 2]})
    yield ("split_2_equal", "Split", 2, [v], [v[:, :1], v[:, 1:]], {"axis": 1})
    t = np.array([[3.0, 1.0, 4.0, 1.5, 5.0], [9.0, 2.0, 6.0, 5.5, 3.0]], np.float32)
    idx = np.argsort(-t, axis=1, kind="stable")[:, :3]
    yield ("topk_1_k", "TopK", 1, [t], [np.take_along_axis(t, idx, 1), idx.astype(np.int64)],
           {"k": 3})
    img = floats(1, 2, 2, 3)
    up = img.repeat(2, axis=2).repeat(3, axis=3)
    yield ("upsample_7_nearest", "Upsample", 7, [img], [up], {"scales": [1.0, 1.0, 2.0, 3.0]})
    yield ("upsample_9_nearest", "Upsample", 9, [img, np.array([1, 1, 2, 3], np.float32)], [up],
           {})
    yield ("upsample_1_nearest", "Upsample", 1, [img], [up],
           {"height_scale": 2.0, "width_scale": 3.0})
    # Gemm 6: C broadcast to (M, N) with broadcast = 1.
    ga, gb, gc = floats(3, 4), floats(4, 5), floats(5)
    gy = (0.5 * (ga.astype(np.float64) @ gb) + 2.0 * gc).astype(np.float32)
    yield ("gemm_6_broadcast", "Gemm", 6, [ga, gb, gc], [gy],
           {"broadcast": 1, "alpha": 0.5, "beta": 2.0})
    # Unary operators of opset 1 with consumed_inputs, which changes nothing.
    yield ("relu_1_consumed_inputs", "Relu", 1, [x], [np.maximum(x, 0)], {"consumed_inputs": [0]})
    yield ("sum_1_consumed_inputs", "Sum", 1, [x, x], [x + x], {"consumed_inputs": [0, 0]})


def reference_check(model, inputs, outputs):
    """None when onnx.reference agrees with the transcription, else why it does not."""
    from onnx.reference import ReferenceEvaluator
    try:
        got = ReferenceEvaluator(model).run(None, {i.name: v for i, v in
                                                   zip(model.graph.input, inputs)})
    except Exception as e:  # noqa: BLE001 - any failure only means the reference cannot say
        return f"onnx.reference does not run it ({type(e).__name__})"
    for k, (want, have) in enumerate(zip(outputs, got)):
        if want.shape != have.shape or not np.allclose(want, have, rtol=1e-5, atol=1e-6):
            return f"onnx.reference disagrees on output {k}"
    return None


def write_legacy(out):
    written, notes = 0, []
    for name, op, opset, inputs, outputs, attrs in [*binary_cases(), *other_cases()]:
        inputs = [np.asarray(v) for v in inputs]
        outputs = [np.asarray(v) for v in outputs]
        model = one_node(op, opset, inputs, outputs, **attrs)
        onnx.checker.check_model(model)
        why = reference_check(model, inputs, outputs)
        if why:
            notes.append(f"test_{name}: {why}")
        write_test(out, f"test_{name}", model, inputs, outputs)
        written += 1
    print(f"{written} legacy tests -> {out}")
    for n in notes:
        print("  note:", n)


# ---------------------------------------------------------------- converted node tests

def with_opset(model, opset):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    return m


def lowest_same_meaning(model, inputs, outputs, floor):
    """`model` under the lowest default-domain opset, not below 7 nor `floor`, at which onnx's
    checker accepts it unchanged and onnxruntime (whose kernels follow each version: Softmax-11
    is not Softmax-13) still gives the expected outputs. The converter has no adapters down
    from several recent versions that only added types or attributes (Add-14, Reshape-14,
    BatchNormalization-15, ...), so the model is first relabelled to where its nodes mean the
    same, then converted; below 7 only the converter goes, which writes the `broadcast`
    attributes the older binary operators need (onnx.reference ignores them, so it cannot tell)."""
    import onnxruntime as ort
    current = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    best = model
    for opset in range(current - 1, max(floor, 7) - 1, -1):
        candidate = with_opset(model, opset)
        try:
            onnx.checker.check_model(candidate, full_check=True)
            quiet = ort.SessionOptions()
            quiet.log_severity_level = 4
            sess = ort.InferenceSession(candidate.SerializeToString(), quiet,
                                        providers=["CPUExecutionProvider"])
            got = sess.run(None, {i.name: np.asarray(v) for i, v in
                                  zip(candidate.graph.input, inputs)})
            same = all(np.asarray(w).shape == np.asarray(g).shape
                       and np.allclose(w, g, rtol=1e-4, atol=1e-5, equal_nan=True)
                       for w, g in zip(outputs, got))
        except Exception:  # noqa: BLE001 - not valid, or not the same meaning, at this opset
            break
        if not same:
            break
        best = candidate
    return best


def write_converted(out, opsets):
    written = 0
    for case in node_cases.collect_testcases(None):
        model = case.model
        if any(not v.type.HasField("tensor_type") for v in [*model.graph.input, *model.graph.output]):
            continue
        if any(o.domain not in ("", "ai.onnx") for o in model.opset_import):
            continue
        if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        inputs, outputs = case.data_sets[0]
        start = lowest_same_meaning(model, inputs, outputs, min(opsets))
        for opset in opsets:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    converted = version_converter.convert_version(start, opset)
                onnx.checker.check_model(converted, full_check=True)
            except Exception:  # noqa: BLE001 - the converter or checker refused this case
                continue
            try:
                write_test(out, f"{case.name}_opset{opset}", converted, inputs, outputs)
            except (TypeError, ValueError, AttributeError, IndexError):
                continue
            written += 1
    print(f"{written} converted tests -> {out}")


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("legacy", "converted"):
        sys.exit(__doc__)
    np.seterr(all="ignore")
    if sys.argv[1] == "legacy":
        out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests/old_opsets/node")
        write_legacy(out)
    else:
        if len(sys.argv) < 3:
            sys.exit(__doc__)
        opsets = [int(o) for o in sys.argv[3:]] or [6, 1]
        write_converted(sys.argv[2], opsets)


if __name__ == "__main__":
    main()
