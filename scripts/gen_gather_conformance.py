"""Writes the GatherMultiaxis conformance suite in the ONNX backend-test layout.

usage: python scripts/gen_gather_conformance.py [DIR]      (default: tests/gather_conformance)

DIR/node/test_gather_multiaxis_<case>/model.onnx + test_data_set_0/{input_0,input_1,output_0}.pb
    cases every runtime must pass: every mapping family of docs/gather-multiaxis.md, negative
    axes and indices, non-contiguous and reordered axes, the three modes, bidirectional
    broadcasting, rank 0, empty axes, zero-sized dimensions, every element type (packed sub-byte
    and string included), int32 and int64 indices;
DIR/expected_failures/test_gather_multiaxis_<case>/model.onnx + test_data_set_0/input_K.pb
    calls the operator must reject, with no outputs; DIR/expected_failures.txt lists each one
    with the message its error must contain (tab-separated).

Expected outputs come from `gather_multiaxis` below, a numpy transcription of the
specification's Definition, independent of the Rust kernels. Element values are moved as bit
patterns ("codes"), so every type is generated the same way and packed at the end.
Needs onnx and numpy. The suite is committed; rerun this after changing a case.
"""

import os
import shutil
import sys

import numpy as np
from onnx import AttributeProto, TensorProto, checker, helper

T = TensorProto
ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "gather_conformance")

# Element type -> (bits per element, how to store codes). Codes are unsigned bit patterns.
WIDTH = {
    T.FLOAT: 32, T.UINT8: 8, T.INT8: 8, T.UINT16: 16, T.INT16: 16, T.INT32: 32, T.INT64: 64,
    T.BOOL: 8, T.FLOAT16: 16, T.DOUBLE: 64, T.UINT32: 32, T.UINT64: 64, T.COMPLEX64: 64,
    T.COMPLEX128: 128, T.BFLOAT16: 16, T.FLOAT8E4M3FN: 8, T.FLOAT8E4M3FNUZ: 8, T.FLOAT8E5M2: 8,
    T.FLOAT8E5M2FNUZ: 8, T.UINT4: 4, T.INT4: 4, T.FLOAT4E2M1: 4, T.FLOAT8E8M0: 8, T.UINT2: 2,
    T.INT2: 2, T.FLOAT6E2M3: 6, T.FLOAT6E3M2: 6, T.STRING: 0,
}
# The lowest IR version that has each newer type.
IR = {T.FLOAT4E2M1: 11, T.FLOAT8E8M0: 12, T.UINT2: 12, T.INT2: 12, T.FLOAT6E2M3: 13, T.FLOAT6E3M2: 13}


def gather_multiaxis(x, indices, axes, mode="error"):
    """The specification's Definition, line for line (raises IndexError / ValueError)."""
    r = x.ndim
    if indices.ndim != r:
        raise ValueError(f"input has rank {r} but indices have rank {indices.ndim}; the ranks must be equal")
    for a in axes:
        if not -r <= a < r:
            raise ValueError(f"axis {a} is out of range for rank {r}")
    axes = [a + r if a < 0 else a for a in axes]
    for i, a in enumerate(axes):
        if a in axes[:i]:
            raise ValueError(f"axis {a} appears more than once in axes")
    if mode not in ("error", "zero", "clamp"):
        raise ValueError(f'unknown mode "{mode}"; expected "error", "zero" or "clamp"')
    c = max(len(axes), 1)
    X, L = list(x.shape), list(indices.shape)
    if r > 0:
        if L[-1] % c:
            raise ValueError(f"last indices dimension {L[-1]} is not a multiple of the coordinate size {c}")
        L[-1] //= c

    def broadcast(d):
        if d in axes or X[d] == L[d] or X[d] == 1:
            return L[d]
        if L[d] == 1:
            return X[d]
        raise ValueError(f"dimension {d} does not broadcast: input has {X[d]}, logical indices have {L[d]}")

    out_shape = [broadcast(d) for d in range(r)]
    out = np.full(out_shape, b"", dtype=object) if x.dtype == object else np.zeros(out_shape, dtype=x.dtype)
    for o in np.ndindex(*out_shape):
        xc = [0 if X[d] == 1 else o[d] for d in range(r)]
        t = [0 if L[d] == 1 else o[d] for d in range(r)]
        if r > 0:
            t[-1] *= c
        zero = False
        for j, a in enumerate(axes):
            position = tuple(t[:-1] + [t[-1] + j])
            v, d = int(indices[position]), X[a]
            if -d <= v < d:
                xc[a] = v + d if v < 0 else v
            elif mode == "zero":
                zero = True
            elif mode == "clamp" and d > 0:
                xc[a] = 0 if v < 0 else d - 1
            else:
                raise IndexError(
                    f"index {v} at indices position [{', '.join(map(str, position))}] "
                    f"is out of range for axis {a} of size {d}")
        if not zero:
            out[o] = x[tuple(xc)]
    return out


def codes(dtype, shape, seed):
    """Random bit patterns for `shape` elements of `dtype` (object array of bytes for strings)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == T.STRING:
        words = [b"", b"a", b"gather", b"\xc3\xa9t\xc3\xa9", b"multi axis", b"x" * 7]
        return np.array([words[i % len(words)] + str(i).encode() for i in range(n)], dtype=object).reshape(shape)
    bits = WIDTH[dtype]
    if dtype == T.BOOL:
        return rng.integers(0, 2, size=shape, dtype=np.uint8)
    if bits == 128:
        return rng.integers(0, 2**63, size=tuple(shape) + (2,), dtype=np.uint64).view(np.dtype((np.void, 16))).reshape(shape)
    hi = 2**bits if bits < 64 else 2**63
    # 1 + ... so no code is all-zero bits: a zero in the output then only comes from mode "zero".
    values = 1 + rng.integers(0, hi - 1, size=shape, dtype=np.uint64)
    return values.astype({2: np.uint8, 4: np.uint8, 6: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits])


def tensor(name, dtype, array):
    """A TensorProto holding the codes of `array` as `dtype` (raw little-endian, packed)."""
    dims = list(array.shape)
    if dtype == T.STRING:
        return helper.make_tensor(name, dtype, dims, [bytes(v) for v in array.flat])
    bits = WIDTH[dtype]
    if bits in (2, 4, 6):
        flat = [int(v) for v in array.flat]
        raw = bytearray((len(flat) * bits + 7) // 8)
        for i, v in enumerate(flat):
            for b in range(bits):
                if v >> b & 1:
                    pos = i * bits + b
                    raw[pos // 8] |= 1 << (pos % 8)
        return helper.make_tensor(name, dtype, dims, bytes(raw), raw=True)
    return helper.make_tensor(name, dtype, dims, np.ascontiguousarray(array).tobytes(), raw=True)


def index_array(values, shape, itype):
    return np.array(values, dtype=np.int64 if itype == T.INT64 else np.int32).reshape(shape)


def model(name, dtype, itype, x_shape, i_shape, axes, mode, out_shape):
    attrs = {} if mode is None else {"mode": mode}
    node = helper.make_node("GatherMultiaxis", ["input", "indices"], ["output"], domain="multigather", name=name, **attrs)
    # An empty list has no element to infer the attribute type from.
    node.attribute.append(helper.make_attribute("axes", list(axes), attr_type=AttributeProto.INTS))
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("input", dtype, x_shape), helper.make_tensor_value_info("indices", itype, i_shape)],
        [helper.make_tensor_value_info("output", dtype, out_shape)])
    return helper.make_model(
        graph, ir_version=IR.get(dtype, 10), producer_name="gen_gather_conformance",
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("multigather", 1)])


def write(directory, name, m, tensors):
    d = os.path.join(directory, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    checker.check_model(m)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for file, t in tensors:
        with open(os.path.join(d, "test_data_set_0", file), "wb") as f:
            f.write(t.SerializeToString())


# (case, input shape, indices values, indices shape, axes, mode); element type float, int64
# indices unless the case list below says otherwise.
CASES = [
    # The proposal's example: axis 1 from the indices, the rest broadcasts.
    ("proposal_example", [4, 2, 1, 2], [i % 2 for i in range(12)], [1, 3, 2, 2], [1], None),
    # Single-axis block gather (ONNX Gather, axis 1 of [3, 4, 2] with indices [2]).
    ("block_gather", [3, 4, 2], [3, 0], [1, 2, 1], [1], None),
    # Single-axis element gather (GatherElements, take_along_axis).
    ("element_gather", [3, 4], [3, 0, 1, 1, 2, 0], [3, 2], [1], None),
    ("element_gather_first_axis", [4, 3], [3, 0, 1, 1, 2, 0], [2, 3], [0], None),
    # Flattened element gather (torch.take): input reshaped to [n, 1].
    ("flat_take", [12, 1], [11, 0, 5, 7], [4, 1], [0], None),
    # Multi-axis block gather (GatherND): rows of [4, 5, 3] at (y, x) pairs.
    ("multi_axis_block", [4, 5, 3], [3, 4, 0, 0, 1, 2], [3, 1, 2], [0, 1], None),
    # Points with (y, x) and with reordered (x, y) coordinates, from the specification.
    ("points_yx", [2, 3], [1, 2, 0, -1, 1, 0], [3, 2], [0, 1], None),
    ("points_xy_reordered_axes", [2, 3], [2, 1, -1, 0, 0, 1], [3, 2], [1, 0], None),
    # Non-contiguous axes (0 and 2), dimension 1 broadcast.
    ("non_contiguous_axes", [3, 2, 4], [2, 3, 0, 1, 1, 0, 2, 2], [2, 2, 2], [0, 2], None),
    # Three axes in a shuffled order.
    ("three_axes_shuffled", [2, 3, 4], [3, 1, 2, 0, 0, 1], [1, 1, 6], [2, 0, 1], None),
    # Negative axes and negative indices.
    ("negative_axis", [3, 4], [-1, 0, -4], [1, 3], [-1], None),
    ("negative_indices", [5], [0, -1, -5, 2], [4], [0], None),
    # Modes on the specification's example.
    ("mode_zero", [5], [0, -1, 4, 5, -6, 9], [6], [0], "zero"),
    ("mode_clamp", [5], [0, -1, 4, 5, -6, 9], [6], [0], "clamp"),
    ("mode_error_in_range", [5], [0, -1, 4, -5], [4], [0], "error"),
    ("mode_zero_multi_axis", [3, 4], [0, 0, 3, 4, -1, -1, 7, 0], [4, 2], [0, 1], "zero"),
    # Bidirectional broadcasting: input [3, 1, 4] with logical indices [1, 5, 2].
    ("broadcast_both_ways", [3, 1, 4], [0, 3, 1, 2, 2, 1, 3, 0, -1, -2], [1, 5, 2], [2], None),
    # Rank 0: the output is the input; the index value is ignored.
    ("rank0", [], [7], [], [], None),
    # Empty axes: a bidirectional broadcast of input with the indices' shape.
    ("empty_axes_broadcast", [3, 1], [9, 9, 9, 9], [1, 4], [], None),
    ("empty_axes_rank1", [1], [5, 5, 5], [3], [], None),
    # Zero-sized dimensions.
    ("zero_sized_input_dim", [0, 3], [0, 2], [1, 2], [1], None),
    ("zero_sized_indices_dim", [1, 3], [], [0, 2], [1], None),
    ("empty_axis_mode_zero", [4, 0], [0, 1, 2] * 4, [4, 3], [1], "zero"),
    ("empty_indices_multi_axis", [4, 5], [], [4, 0], [0, 1], None),
]

# Expected failures: (case, input shape, index values, indices shape, axes, mode, message).
FAILURES = [
    ("fail_index_out_of_range", [5], [0, -1, 4, 5, -6, 9], [6], [0], "error",
     "index 5 at indices position [3] is out of range for axis 0 of size 5"),
    ("fail_negative_index_out_of_range", [2, 3], [0, 1, -4, 0], [2, 2], [1, 0], None,
     "index -4 at indices position [1, 0] is out of range for axis 1 of size 3"),
    ("fail_clamp_empty_axis", [2, 0], [0, 5], [2, 1], [1], "clamp",
     "index 0 at indices position [0, 0] is out of range for axis 1 of size 0"),
    ("fail_rank_mismatch", [2, 3], [0, 1, 2], [3], [0], None,
     "input has rank 2 but indices have rank 1; the ranks must be equal"),
    ("fail_axis_out_of_range", [2, 3], [0], [1, 1], [2], None,
     "axis 2 is out of range for rank 2"),
    ("fail_duplicate_axis", [2, 3], [0, 0], [1, 2], [-1, 1], None,
     "axis 1 appears more than once in axes"),
    ("fail_last_dim_not_multiple", [2, 3], [0] * 9, [3, 3], [0, 1], None,
     "last indices dimension 3 is not a multiple of the coordinate size 2"),
    ("fail_not_broadcastable", [2, 1], [0] * 12, [3, 4], [], None,
     "dimension 0 does not broadcast: input has 2, logical indices have 3"),
    ("fail_unknown_mode", [5], [0], [1], [0], "wrap",
     'unknown mode "wrap"; expected "error", "zero" or "clamp"'),
]


def main():
    node_dir = os.path.join(ROOT, "node")
    fail_dir = os.path.join(ROOT, "expected_failures")
    for d in (node_dir, fail_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    seed = 0
    # Every case in float with int64 indices, and with int32 indices.
    runs = [(c, T.FLOAT, T.INT64, "") for c in CASES] + [(c, T.FLOAT, T.INT32, "_int32_indices") for c in CASES]
    # Every element type on the element gather and on the block gather (rows of 2).
    for dtype in WIDTH:
        if dtype == T.FLOAT:
            continue
        tname = T.DataType.Name(dtype).lower()
        for case in ("element_gather", "block_gather", "mode_zero_multi_axis"):
            c = next(c for c in CASES if c[0] == case)
            runs.append((c, dtype, T.INT64, "_" + tname))
    for (case, x_shape, values, i_shape, axes, mode), dtype, itype, suffix in runs:
        seed += 1
        name = f"test_gather_multiaxis_{case}{suffix}"
        x = codes(dtype, x_shape, seed)
        idx = index_array(values, i_shape, itype)
        out = gather_multiaxis(x, idx, axes, mode or "error")
        m = model(name, dtype, itype, x_shape, i_shape, axes, mode, list(out.shape))
        write(node_dir, name, m, [
            ("input_0.pb", tensor("input", dtype, x)),
            ("input_1.pb", tensor("indices", itype, idx)),
            ("output_0.pb", tensor("output", dtype, out)),
        ])
    manifest = ["# Expected failures of the GatherMultiaxis conformance suite: test<TAB>the message"
                " its error must contain.", "# Written by scripts/gen_gather_conformance.py."]
    for case, x_shape, values, i_shape, axes, mode, message in FAILURES:
        name = f"test_gather_multiaxis_{case}"
        x = codes(T.FLOAT, x_shape, 0)
        idx = index_array(values, i_shape, T.INT64)
        try:
            gather_multiaxis(x, idx, axes, mode or "error")
        except (IndexError, ValueError) as e:
            assert str(e) == message, (case, str(e), message)
        else:
            raise AssertionError(f"{case} does not fail")
        m = model(name, T.FLOAT, T.INT64, x_shape, i_shape, axes, mode, ["out_" + str(k) for k in range(len(x_shape))])
        write(fail_dir, name, m, [
            ("input_0.pb", tensor("input", T.FLOAT, x)),
            ("input_1.pb", tensor("indices", T.INT64, idx)),
        ])
        manifest.append(f"{name}\t{message}")
    with open(os.path.join(ROOT, "expected_failures.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    print(f"{len(runs)} tests and {len(FAILURES)} expected failures in {ROOT}")


if __name__ == "__main__":
    main()
