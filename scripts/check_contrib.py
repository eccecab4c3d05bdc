"""Runs one-node models of the com.microsoft contrib operators multigather implements in both
multigather and onnxruntime, on random float inputs: outputs must agree within rtol 1e-4.

usage: python scripts/check_contrib.py [case-name-prefix...]   (needs onnx, onnxruntime, numpy;
       MULTIGATHER = the binary, default target/release/multigather)

Covers Gelu, FastGelu (with and without bias), BiasGelu, QuickGelu,
SkipLayerNormalization (with beta, bias and the sum output), SkipSimplifiedLayerNormalization
and SimplifiedLayerNormalization (default domain), at batch 2 x sequence 5 x hidden 16.
QLinearSigmoid and QLinearLeakyRelu run on uint8 and int8 inputs with per-tensor scales and zero
points (initializers); their outputs must match exactly.
The transformer optimizer's fusions: Attention (mask index 1-D end / end+start, 2-D, 3-D,
unidirectional with past/present, attention_bias, qkv_hidden_sizes), MultiHeadAttention (self and
cross attention, bias, key padding mask, past/present, attention_bias), GroupQueryAttention
(prompt, past, packed QKV, rotary, softcap, local window; batches of differing lengths with a
past buffer longer than the total, a right-padded prompt, smooth_softmax, head_sink,
attention_bias), RotaryEmbedding (3-D, 4-D, offset,
interleaved, partial) and EmbedLayerNormalization. The quantised operators: MatMulIntegerToFloat,
DynamicQuantizeMatMul, QGemm (float and uint8/int8 outputs, transposes, per-column scales, int32
bias broadcast by row and by column; exact), MatMulNBits (4-bit; uint8 and float zero points, g_idx: with packed
uint8 zero points the reference is onnxruntime on the same model with the zero points as
floats, as its CPU kernel dequantises with 8 in place of packed zero points when g_idx is
given), GatherBlockQuantized (4- and 8-bit), and
QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool, which may differ from
onnxruntime by one code (its kernels requantise with their own float arithmetic), and
QLinearSoftmax (uint8 and int8, opset 12 rows over the trailing dims and opset 13 rows along
one axis), which must match exactly: its integer recipe is reproduced step for step.
QAttention (int8 weights per column with a mask index; uint8 weights, unidirectional, past).
DynamicQuantizeLSTM: float LSTM models (forward, reverse, bidirectional; with and without initial
states and sequence_lens; clip and input_forget) quantised by onnxruntime's `quantize_dynamic`
(int8 per channel, uint8 per tensor) into target/contrib-lstm/; each line also prints how far
onnxruntime's int8 path is from the float LSTM. Onnxruntime runs on one thread throughout: its
quantised LSTM quantises each thread's share of the batch on its own.
Attention with a shared past/present buffer (past_present_share_buffer, past_sequence_length:
unidirectional, first step, 2-D key mask) is compared with a numpy reference
(`shared_buffer_reference`), since onnxruntime's CPU kernel refuses it; the reference itself
must agree with onnxruntime on the same case in its separate past/present form.
Left out because onnxruntime's CPU kernels refuse them: Attention's 4-D (Megatron) mask and
MultiHeadAttention's packed QKV / KV layouts (implemented; see docs/conformance.md for what
the unit tests cover). Each line prints the largest |difference| of the outputs.
BiasAdd is left out: onnxruntime implements it for CUDA only (its unit test is the check).
The operators of models saved by onnxruntime's graph optimizer: FusedMatMul and TransposeMatMul
(alpha, transA/transB, transBatchA/transBatchB, 1-D operands, broadcast batches), FusedGemm with
each activation onnxruntime fuses into a Gemm (its `activation_*` attributes), NhwcMaxPool on
uint8 and int8 (pads, strides, dilations, ceil_mode, auto_pad; exact).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from check_models import ort_saturates_u8s8, uses_u8s8

BIN = os.environ.get("MULTIGATHER", "target/release/multigather")
B, S, H = 2, 5, 16
ort.set_default_logger_severity(3)


def case(op, inputs, outputs=("y",), domain="com.microsoft", dtype=TensorProto.FLOAT,
         consts=(), out_types=None, **attrs):
    """A one-node model: inputs are (name, shape) pairs of `dtype`, then `consts` (numpy arrays,
    named) as initializers; an empty name is an absent optional input. `out_types` gives each
    output's element type when they are not all `dtype`."""
    names = [n for n, _ in inputs] + [n for n, _ in consts]
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    types = out_types or [dtype] * len(outputs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs if n],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types) if o],
        initializer=[numpy_helper.from_array(v, n) for n, v in consts if n])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


X, V = ("x", [B, S, H]), [H]
CASES = {
    "gelu": case("Gelu", [X]),
    "fast_gelu": case("FastGelu", [X]),
    "fast_gelu_bias": case("FastGelu", [X, ("b", V)]),
    "bias_gelu": case("BiasGelu", [X, ("b", V)]),
    "quick_gelu": case("QuickGelu", [X], alpha=1.5),
    "skip_layer_norm": case("SkipLayerNormalization",
                            [X, ("s", [B, S, H]), ("g", V), ("beta", V), ("b", V)],
                            outputs=("y", "", "", "sum"), epsilon=1e-5),
    "skip_simplified_layer_norm": case("SkipSimplifiedLayerNormalization",
                                       [X, ("s", [B, S, H]), ("g", V)], epsilon=1e-6),
    "simplified_layer_norm": case("SimplifiedLayerNormalization", [X, ("g", V)], domain="",
                                  axis=-1, epsilon=1e-6),
}


def qlinear(op, np_type, zero, **attrs):
    """A QLinear unary operator on `np_type` with scales 0.05 in / 0.01 out and zero points
    `zero` in / `zero + 3` out (absent when `zero` is None)."""
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(np_type))
    z = (lambda n, v: (n, np.array(v, np_type))) if zero is not None else (lambda n, v: ("", None))
    return case(op, [X], dtype=dtype, consts=[
        ("sx", np.array(0.05, np.float32)), z("zx", zero),
        ("sy", np.array(0.01, np.float32)), z("zy", (zero or 0) + 3)], **attrs)


CASES.update({
    "qlinear_sigmoid_u8": qlinear("QLinearSigmoid", np.uint8, 128),
    "qlinear_sigmoid_i8": qlinear("QLinearSigmoid", np.int8, None),
    "qlinear_leaky_relu_u8": qlinear("QLinearLeakyRelu", np.uint8, 120, alpha=0.1),
    "qlinear_leaky_relu_i8": qlinear("QLinearLeakyRelu", np.int8, -5, alpha=0.2),
})


def node_case(op, args, outputs=("y",), out_types=None, **attrs):
    """A one-node model whose inputs are given in node order: `None` is an absent input,
    `(name, [dims])` a float graph input (`(name, [dims], type)` another type), `(name, array)`
    an initializer."""
    names, graph_inputs, inits = [], [], []
    for a in args:
        if a is None:
            names.append("")
        elif isinstance(a[1], np.ndarray):
            names.append(a[0])
            inits.append(numpy_helper.from_array(a[1], a[0]))
        else:
            names.append(a[0])
            dtype = a[2] if len(a) > 2 else TensorProto.FLOAT
            graph_inputs.append(helper.make_tensor_value_info(a[0], dtype, a[1]))
    node = helper.make_node(op, names, list(outputs), domain="com.microsoft", **attrs)
    types = out_types or [TensorProto.FLOAT] * len(outputs)
    graph = helper.make_graph(
        [node], op, graph_inputs,
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types) if o],
        initializer=inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def transformer_cases():
    """The transformer optimizer's fused operators at batch 2, hidden 16, 2 heads of 8."""
    rng = np.random.default_rng(1)
    f = lambda *d: (rng.standard_normal(d) * 0.5).astype(np.float32)
    i32 = lambda v: np.array(v, np.int32)
    nh, hd = 2, H // 2
    w, bias = ("w", f(H, 3 * H)), ("bias", f(3 * H))
    mask2 = i32([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    mask3 = (rng.random((B, S, S)) > 0.3).astype(np.int32)
    mask3[:, :, 0] = 1
    att = lambda *extra, outputs=("y",), **a: node_case(
        "Attention", [X, w, bias, *extra], outputs=outputs, num_heads=nh, **a)
    cases = {
        "attention": att(),
        "attention_mask_1d_end": att(("m", i32([5, 3]))),
        "attention_mask_1d_end_start": att(("m", i32([5, 4, 0, 1]))),
        "attention_mask_2d": att(("m", mask2)),
        "attention_mask_3d": att(("m", mask3)),
        "attention_unidirectional_past_present": att(
            None, ("past", [2, B, nh, 3, hd]), outputs=("y", "present"), unidirectional=1),
        "attention_past_mask_2d": att(
            ("m", np.ones((B, S + 3), np.int32)), ("past", [2, B, nh, 3, hd]),
            outputs=("y", "present")),
        "attention_bias_input": att(None, None, ("ab", [B, nh, S, S])),
        "attention_qkv_hidden_sizes": node_case(
            "Attention", [X, ("w", f(H, 2 * H + 8)), ("bias", f(2 * H + 8))],
            num_heads=nh, qkv_hidden_sizes=[H, H, 8]),
        "mha_self_with_bias_mask_past": node_case(
            "MultiHeadAttention",
            [("q", [B, S, H]), ("k", [B, S, H]), ("v", [B, S, H]), ("b", f(3 * H)),
             ("m", np.concatenate([np.ones((B, 3), np.int32), mask2], 1)), None,
             ("pk", [B, nh, 3, hd]), ("pv", [B, nh, 3, hd])],
            outputs=("y", "pk_out", "pv_out"), num_heads=nh),
        "mha_key_padding_2d": node_case(
            "MultiHeadAttention",
            [("q", [B, S, H]), ("k", [B, 4, H]), ("v", [B, 4, H]), None,
             ("m", i32([[1, 1, 0, 0], [1, 1, 1, 1]]))], num_heads=nh),
        "mha_unidirectional": node_case(
            "MultiHeadAttention", [("q", [B, S, H]), ("k", [B, S, H]), ("v", [B, S, H])],
            num_heads=nh, unidirectional=1),
        "mha_cross_bnsh": node_case(
            "MultiHeadAttention",
            [("q", [B, S, H]), ("k", [B, nh, 4, hd]), ("v", [B, nh, 4, hd]), ("b", f(3 * H))],
            num_heads=nh),
        "mha_attention_bias": node_case(
            "MultiHeadAttention",
            [("q", [B, S, H]), ("k", [B, S, H]), ("v", [B, S, H]), None, None,
             ("ab", [1, nh, S, S])], num_heads=nh),
    }
    cos, sin = np.cos(f(32, hd // 2) * 3), np.sin(f(32, hd // 2) * 3)
    # onnxruntime's CPU kernel takes several new tokens with a past only at batch 1, and
    # rotary embedding only on heads whose size is a multiple of 16.
    gqa_h, kv_h, gd = 4, 2, 16
    gcos, gsin = np.cos(f(32, gd // 2) * 3), np.sin(f(32, gd // 2) * 3)
    for name, batch, seq, past, extra in [
        ("gqa_prompt", B, S, 0, {}),
        ("gqa_past_one_token", B, 1, 3, {}),
        ("gqa_past_batch1", 1, S, 3, {}),
        ("gqa_packed_qkv", B, S, 0, dict(packed=True)),
        ("gqa_rotary_softcap_window", 1, S, 3,
         dict(do_rotary=1, softcap=2.0, local_window_size=3)),
        ("gqa_rotary_interleaved", B, 1, 2, dict(do_rotary=1, rotary_interleaved=1)),
    ]:
        if extra.pop("packed", False):
            args = [("qkv", [batch, seq, (gqa_h + 2 * kv_h) * gd]), None, None]
        else:
            args = [("q", [batch, seq, gqa_h * gd]), ("k", [batch, seq, kv_h * gd]),
                    ("v", [batch, seq, kv_h * gd])]
        args += [("pk", [batch, kv_h, past, gd]), ("pv", [batch, kv_h, past, gd])] \
            if past else [None, None]
        args += [("seqlens", i32([past + seq - 1] * batch)), ("total", i32(past + seq))]
        if extra.get("do_rotary"):
            args += [("cos", gcos.astype(np.float32)), ("sin", gsin.astype(np.float32))]
        cases[name] = node_case("GroupQueryAttention", args, outputs=("y", "pk_out", "pv_out"),
                                num_heads=gqa_h, kv_num_heads=kv_h, **extra)
    # Batches of differing lengths (seqlens_k), as onnxruntime's CPU kernel reads them: a past
    # buffer as long as the longest sequence or longer (the shared past/present layout) and
    # token generation per batch from its own length, a right-padded first prompt, a softmax
    # sink (smooth_softmax, head_sink), attention_bias over the total length.
    qkv = lambda batch, seq: [("q", [batch, seq, gqa_h * gd]), ("k", [batch, seq, kv_h * gd]),
                              ("v", [batch, seq, kv_h * gd])]
    past = lambda batch, n: [("pk", [batch, kv_h, n, gd]), ("pv", [batch, kv_h, n, gd])]
    sink = ("sink", f(gqa_h))
    for name, args, extra in [
        ("gqa_variable_lengths_token", qkv(3, 1) + past(3, 6) + [
            ("seqlens", i32([2, 5, 4])), ("total", i32(6))], {}),
        ("gqa_shared_buffer_window_softcap", qkv(2, 1) + past(2, 8) + [
            ("seqlens", i32([4, 2])), ("total", i32(5))], dict(local_window_size=3, softcap=1.5)),
        ("gqa_right_padded_prompt", qkv(B, S) + [None, None, ("seqlens", i32([2, 4])),
                                                 ("total", i32(S))], {}),
        ("gqa_smooth_softmax_prompt", qkv(B, S) + [None, None, ("seqlens", i32([4, 4])),
                                                   ("total", i32(S))], dict(smooth_softmax=1)),
        ("gqa_head_sink_variable_lengths", qkv(B, 1) + past(B, 4) + [
            ("seqlens", i32([4, 1])), ("total", i32(5)), None, None, None, None, sink], {}),
        ("gqa_attention_bias_variable_lengths", qkv(B, 1) + past(B, 5) + [
            ("seqlens", i32([5, 3])), ("total", i32(6)), None, None, None,
            ("ab", [B, 1, 1, 6])], {}),
        ("gqa_rotary_variable_lengths", qkv(B, 1) + past(B, 6) + [
            ("seqlens", i32([6, 2])), ("total", i32(7)), ("cos", gcos.astype(np.float32)),
            ("sin", gsin.astype(np.float32))], dict(do_rotary=1)),
    ]:
        cases[name] = node_case("GroupQueryAttention", args, outputs=("y", "pk_out", "pv_out"),
                                num_heads=gqa_h, kv_num_heads=kv_h, **extra)
    pos = np.array(rng.integers(0, 32, (B, S)), np.int64)
    rot = lambda x, p, **a: node_case(
        "RotaryEmbedding", [x, ("pos", p), ("cos", cos.astype(np.float32)),
                            ("sin", sin.astype(np.float32))], **a)
    cases.update({
        "rotary_3d": rot(X, pos, num_heads=nh),
        "rotary_3d_offset_interleaved": rot(X, np.array([4], np.int64), interleaved=1),
        "rotary_4d": rot(("x", [B, nh, S, hd]), pos),
        "rotary_partial_dim": node_case(
            "RotaryEmbedding", [X, ("pos", pos), ("cos", cos[:, :2].astype(np.float32)),
                                ("sin", sin[:, :2].astype(np.float32))],
            num_heads=nh, rotary_embedding_dim=4),
    })
    ids = np.array(rng.integers(0, 30, (B, S)), np.int32)
    seg = np.array(rng.integers(0, 2, (B, S)), np.int32)
    emb = [("words", f(30, H)), ("positions", f(S, H))]
    norm = [("gamma", f(H)), ("beta", f(H))]
    cases.update({
        "embed_layer_norm": node_case(
            "EmbedLayerNormalization",
            [("ids", ids), ("seg", seg), *emb, ("segments", f(2, H)), *norm, ("mask", mask2)],
            outputs=("y", "mask_index", "sum"),
            out_types=[TensorProto.FLOAT, TensorProto.INT32, TensorProto.FLOAT], epsilon=1e-5),
        "embed_layer_norm_no_segment_no_mask": node_case(
            "EmbedLayerNormalization", [("ids", ids), None, *emb, None, *norm],
            outputs=("y", "mask_index"), out_types=[TensorProto.FLOAT, TensorProto.INT32]),
    })
    return cases


CASES.update(transformer_cases())


def shared_buffer_cases():
    """Attention with a shared past/present buffer (past_present_share_buffer=1): `past` is the
    whole (2, B, heads, MAX, head) cache, the initializer `psl` (past_sequence_length) says how
    many positions hold keys and values. onnxruntime's CPU kernel refuses this form (only its
    GPU kernels read past_sequence_length: "past_sequence_length tensor must be of one element
    when past_present_share_buffer is set"), so these are checked against
    `shared_buffer_reference` instead."""
    rng = np.random.default_rng(2)
    f = lambda *d: (rng.standard_normal(d) * 0.5).astype(np.float32)
    nh, hd, most = 2, H // 2, 12
    w, bias = ("w", f(H, 3 * H)), ("bias", f(3 * H))
    past = ("past", [2, B, nh, most, hd])
    psl = lambda n: ("psl", np.array(n, np.int32))
    mask = np.ones((B, 4 + S), np.int32)
    mask[0, 1] = mask[1, 6] = 0
    att = lambda m, n, **a: node_case(
        "Attention", [X, w, bias, m, past, None, psl(n)], outputs=("y", "present"),
        num_heads=nh, past_present_share_buffer=1, **a)
    return {
        "attention_shared_buffer_unidirectional": att(None, 4, unidirectional=1),
        "attention_shared_buffer_first_step": att(None, 0, unidirectional=1),
        "attention_shared_buffer_mask_2d": att(("m", mask), 4),
    }


def shared_buffer_reference(model, feeds):
    """numpy's Attention with a shared past/present buffer, from the contrib-op documentation:
    Q, K, V = x @ w + bias split in three, heads of `hidden / num_heads`; the keys and values
    attended are the first `psl` positions of `past` then the new ones; scores scaled by
    1/sqrt(head), masked (2-D key mask, `unidirectional`) with -10000 as onnxruntime does;
    `present` is `past` with the new keys and values written at positions psl .. psl + S."""
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x, past = feeds["x"], feeds["past"]
    n = int(consts["psl"])
    nh = attrs["num_heads"]
    b, s, hidden = x.shape
    hd = hidden // nh
    q, k, v = np.split(x.astype(np.float64) @ consts["w"] + consts["bias"], 3, axis=-1)
    heads = lambda t: t.reshape(b, s, nh, hd).transpose(0, 2, 1, 3)
    q, k, v = heads(q), heads(k), heads(v)
    keys = np.concatenate([past[0][:, :, :n], k], axis=2)
    values = np.concatenate([past[1][:, :, :n], v], axis=2)
    t = n + s
    scores = q @ keys.transpose(0, 1, 3, 2) / np.sqrt(hd)
    allowed = np.ones((b, 1, s, t), bool)
    if "m" in consts:
        allowed &= consts["m"][:, None, None, :].astype(bool)
    if attrs.get("unidirectional", 0):
        allowed &= (np.arange(t)[None, :] <= n + np.arange(s)[:, None])[None, None]
    scores = np.where(allowed, scores, scores - 10000.0)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ values).transpose(0, 2, 1, 3).reshape(b, s, hidden)
    present = past.astype(np.float64).copy()
    present[0][:, :, n:t] = k
    present[1][:, :, n:t] = v
    return [y.astype(np.float32), present.astype(np.float32)]


def separate_past_twin(model, feeds):
    """onnxruntime on the shared-buffer case as its separate past/present form (the first `psl`
    positions of `past` as the past): `y` and the first psl + S positions of `present`, what
    the numpy reference must agree with."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    node = twin.graph.node[0]
    n = int(numpy_helper.to_array(next(t for t in twin.graph.initializer if t.name == "psl")))
    del node.input[5:]
    kept = [a for a in node.attribute if a.name != "past_present_share_buffer"]
    del node.attribute[:]
    node.attribute.extend(kept)
    past = next(i for i in twin.graph.input if i.name == "past")
    past.type.tensor_type.shape.dim[3].dim_value = n
    feeds = dict(feeds, past=np.ascontiguousarray(feeds["past"][:, :, :, :n]))
    y, present = ort.InferenceSession(twin.SerializeToString(),
                                      providers=["CPUExecutionProvider"]).run(None, feeds)
    return y, present


def shared_reference_checked(model, feeds):
    """`shared_buffer_reference`, after checking it against onnxruntime's separate past form."""
    want = shared_buffer_reference(model, feeds)
    y, present = separate_past_twin(model, feeds)
    t = present.shape[3]
    if not (np.allclose(want[0], y, rtol=1e-4, atol=1e-5)
            and np.allclose(want[1][:, :, :, :t], present, rtol=1e-4, atol=1e-5)):
        raise AssertionError("the numpy reference disagrees with onnxruntime's separate past")
    return want


SHARED_BUFFER = shared_buffer_cases()
CASES.update(SHARED_BUFFER)


def quantization_cases():
    """The quantised contrib operators, weights and quantisation parameters as initializers."""
    rng = np.random.default_rng(2)
    u8 = lambda *d: rng.integers(0, 256, d).astype(np.uint8)
    i8 = lambda *d: rng.integers(-128, 128, d).astype(np.int8)
    f = lambda *d: rng.standard_normal(d).astype(np.float32)
    sc = lambda v: np.array(v, np.float32)
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    qa = ("a", [B, S, H], U8)
    cases = {
        "matmul_integer_to_float_u8_per_column": node_case(
            "MatMulIntegerToFloat",
            [qa, ("b", u8(H, 8)), ("sa", sc(0.02)), ("sb", (rng.random(8) * 0.05).astype(np.float32)),
             ("za", np.array(120, np.uint8)), ("zb", u8(8)), ("bias", f(8))]),
        "matmul_integer_to_float_u8_i8": node_case(
            "MatMulIntegerToFloat", [qa, ("b", i8(H, 8)), ("sa", sc(0.02)), ("sb", sc(0.03))]),
        "dynamic_quantize_matmul": node_case(
            "DynamicQuantizeMatMul",
            [X, ("b", i8(H, 8)), ("sb", (rng.random(8) * 0.05).astype(np.float32)), None,
             ("bias", f(8))]),
        "dynamic_quantize_matmul_u8_zero_point": node_case(
            "DynamicQuantizeMatMul", [X, ("b", u8(H, 8)), ("sb", sc(0.04)), ("zb", np.array(128, np.uint8))]),
        "qgemm_u8_i8_per_column_bias_float": node_case(
            "QGemm",
            [("a", [6, H], U8), ("sa", sc(0.02)), ("za", np.array(120, np.uint8)), ("b", i8(H, 8)),
             ("sb", (rng.random(8) * 0.05).astype(np.float32)), ("zb", np.zeros(8, np.int8)),
             ("c", rng.integers(-5000, 5000, 8).astype(np.int32))], alpha=0.75),
        "qgemm_u8_u8_trans_b_quantised": node_case(
            "QGemm",
            [("a", [6, H], U8), ("sa", sc(0.02)), ("za", np.array(128, np.uint8)), ("b", u8(8, H)),
             ("sb", sc(0.03)), ("zb", np.array(100, np.uint8)),
             ("c", rng.integers(-3000, 3000, (6, 1)).astype(np.int32)), ("sy", sc(0.4)),
             ("zy", np.array(110, np.uint8))], out_types=[U8], transB=1),
        "qgemm_i8_i8_trans_a_quantised": node_case(
            "QGemm",
            [("a", [H, 6], I8), ("sa", sc(0.05)), ("za", np.array(3, np.int8)), ("b", i8(H, 8)),
             ("sb", (rng.random(8) * 0.05).astype(np.float32)), ("zb", np.zeros(8, np.int8)), None,
             ("sy", sc(0.7)), ("zy", np.array(-4, np.int8))], out_types=[I8], transA=1),
        "matmul_nbits_4bit_zero_points_bias": node_case(
            "MatMulNBits",
            [("a", [B, S, 32]), ("b", u8(8, 2, 8)), ("s", (rng.random(16) * 0.1).astype(np.float32)),
             ("z", u8(8)), None, ("bias", f(8))], K=32, N=8, bits=4, block_size=16),
        "matmul_nbits_4bit_default_zero": node_case(
            "MatMulNBits", [("a", [3, 40]), ("b", u8(8, 2, 16)), ("s", (rng.random(16) * 0.1).astype(np.float32))],
            K=40, N=8, bits=4, block_size=32),
        "qlinear_add_u8_broadcast": node_case(
            "QLinearAdd",
            [qa, ("sa", sc(0.05)), ("za", np.array(128, np.uint8)), ("b", [H], U8), ("sb", sc(0.03)),
             ("zb", np.array(100, np.uint8)), ("sc", sc(0.08)), ("zc", np.array(120, np.uint8))]),
        "qlinear_mul_i8": node_case(
            "QLinearMul",
            [("a", [B, S, H], I8), ("sa", sc(0.05)), ("za", np.array(3, np.int8)), ("b", [B, S, H], I8),
             ("sb", sc(0.04)), ("zb", np.array(-2, np.int8)), ("sc", sc(0.2)), ("zc", np.array(1, np.int8))]),
        "qlinear_concat_u8": node_case(
            "QLinearConcat",
            [("sy", sc(0.1)), ("zy", np.array(128, np.uint8)), ("x1", [2, 3, 4], U8), ("s1", sc(0.05)),
             ("z1", np.array(120, np.uint8)), ("x2", [2, 5, 4], U8), ("s2", sc(0.2)), ("z2", np.array(130, np.uint8))],
            axis=1),
        "qlinear_softmax_u8_last_axis": node_case(
            "QLinearSoftmax",
            [qa, ("sx", sc(0.08)), ("zx", np.array(128, np.uint8)), ("sy", sc(1 / 256)),
             ("zy", np.array(0, np.uint8))], opset=13, axis=-1),
        "qlinear_softmax_i8_middle_axis": node_case(
            "QLinearSoftmax",
            [("a", [B, S, H], I8), ("sx", sc(0.05)), None, ("sy", sc(1 / 256)),
             ("zy", np.array(-128, np.int8))], opset=13, axis=1),
        # Peaked rows (a large x_scale) with a zero point of 0: probabilities near 1 give codes
        # above 127, which onnxruntime saturates.
        "qlinear_softmax_i8_saturating": node_case(
            "QLinearSoftmax",
            [("a", [B, S, H], I8), ("sx", sc(0.2)), None, ("sy", sc(1 / 256)),
             ("zy", np.array(0, np.int8))], opset=13, axis=-1),
        "qlinear_softmax_u8_opset12_flattened": node_case(
            "QLinearSoftmax", [qa, ("sx", sc(0.02)), None, ("sy", sc(1 / 255)), ("zy", np.array(5, np.uint8))],
            opset=12,
            axis=1),
        "qlinear_global_average_pool_nchw": node_case(
            "QLinearGlobalAveragePool",
            [("x", [2, 3, 4, 4], U8), ("sx", sc(0.05)), ("zx", np.array(128, np.uint8)), ("sy", sc(0.02)),
             ("zy", np.array(100, np.uint8))], channels_last=0),
        "qlinear_global_average_pool_nhwc_i8": node_case(
            "QLinearGlobalAveragePool",
            [("x", [2, 4, 4, 3], I8), ("sx", sc(0.05)), ("zx", np.array(0, np.int8)), ("sy", sc(0.02)),
             ("zy", np.array(5, np.int8))], channels_last=1),
    }
    # MatMulNBits with float zero points (scaled like the codes) and with g_idx (act-order:
    # each row of K takes the scale and zero point of its group, here a shuffle of the blocks).
    kk, nn, bs = 64, 8, 16
    g_idx = (rng.permutation(kk) // bs).astype(np.int32)
    nbits = lambda name, zeros, g, *extra: node_case(
        "MatMulNBits", [("a", [B, S, kk]), ("b", u8(nn, kk // bs, bs // 2)),
                        ("s", (rng.random(nn * kk // bs) * 0.1).astype(np.float32)), zeros, g,
                        *extra], K=kk, N=nn, bits=4, block_size=bs)
    cases.update({
        "matmul_nbits_float_zero_points": nbits(
            "f", ("z", (rng.random(nn * kk // bs) * 15).astype(np.float32)), None),
        "matmul_nbits_g_idx_default_zero": nbits("g", None, ("g", g_idx)),
        "matmul_nbits_g_idx_float_zero_points_bias": nbits(
            "gf", ("z", (rng.random(nn * kk // bs) * 15).astype(np.float32)), ("g", g_idx),
            ("bias", f(nn))),
        "matmul_nbits_g_idx_uint8_zero_points": nbits("gu", ("z", u8(nn, 2)), ("g", g_idx)),
    })
    cols = (rng.random(3 * H) * 0.05).astype(np.float32)
    cases.update({
        "qattention_i8_weights_per_column_mask": node_case(
            "QAttention",
            [qa, ("w", i8(H, 3 * H)), ("bias", f(3 * H)), ("sx", sc(0.02)), ("sw", cols),
             ("mask", np.array([3, 5], np.int32)), ("zx", np.array(128, np.uint8)),
             ("zw", np.zeros(3 * H, np.int8))], num_heads=2),
        "qattention_u8_unidirectional_past": node_case(
            "QAttention",
            [qa, ("w", u8(H, 3 * H)), ("bias", f(3 * H)), ("sx", sc(0.02)), ("sw", sc(0.01)),
             None, ("zx", np.array(120, np.uint8)), ("zw", np.array(128, np.uint8)),
             ("past", [2, B, 2, 3, H // 2])],
            outputs=("y", "present"), num_heads=2, unidirectional=1),
    })
    ids = ("ids", np.array([[3, 0], [5, 3]], np.int64))
    cases.update({
        "gather_block_quantized_4bit": node_case(
            "GatherBlockQuantized",
            [("data", u8(6, 16)), ids, ("s", (rng.random((6, 2)) * 0.1).astype(np.float32)),
             ("z", u8(6, 1))], gather_axis=0, quantize_axis=1, block_size=16, bits=4),
        "gather_block_quantized_8bit_default_zero": node_case(
            "GatherBlockQuantized",
            [("data", u8(6, 32)), ids, ("s", (rng.random((6, 2)) * 0.1).astype(np.float32))],
            gather_axis=0, quantize_axis=1, block_size=16, bits=8),
    })
    for name, model in cases.items():
        if name.startswith("qlinear"):
            dtype = model.graph.input[0].type.tensor_type.elem_type
            model.graph.output[0].type.tensor_type.elem_type = dtype
    return cases


CASES.update(quantization_cases())


def float_zero_points_twin(model):
    """`model` (a MatMulNBits with g_idx and packed uint8 zero points) with its zero points
    unpacked into floats: onnxruntime's CPU kernel (1.32) reads packed zero points with g_idx
    but dequantises with 8 in their place, and honours float ones, so the twin gives what the
    operator means."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    for init in twin.graph.initializer:
        if init.name == "z":
            packed = numpy_helper.to_array(init)
            n, blocks = packed.shape[0], len(numpy_helper.to_array(
                next(i for i in twin.graph.initializer if i.name == "s"))) // packed.shape[0]
            nibbles = np.stack([packed & 0xF, packed >> 4], -1).reshape(n, -1)[:, :blocks]
            init.CopyFrom(numpy_helper.from_array(nibbles.reshape(-1).astype(np.float32), "z"))
    return twin


# Cases whose expected values come from onnxruntime on another model that means the same.
REFERENCE = {"matmul_nbits_g_idx_uint8_zero_points":
             float_zero_points_twin(CASES["matmul_nbits_g_idx_uint8_zero_points"])}


def lstm_cases():
    """`DynamicQuantizeLSTM`: float `LSTM` models quantised by onnxruntime's own
    `quantize_dynamic` (int8 per channel or uint8 per tensor), written under target/contrib-lstm/
    (not committed). Each has its weights, biases and `sequence_lens` as initializers; `X` and
    the initial states are inputs. Returns the quantised models and, for reference, the float
    ones."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work = os.path.join("target", "contrib-lstm")
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(3)
    seq, batch, inp = 6, 3, 5
    shapes = {"forward": 1, "reverse": 1, "bidirectional": 2}
    specs = [
        # name, direction, hidden, weight type, per channel, states, sequence_lens, extra attributes
        ("forward_u8_per_tensor", "forward", 8, QuantType.QUInt8, False, False, None, {}),
        ("forward_i8_per_channel_states", "forward", 8, QuantType.QInt8, True, True, None, {}),
        ("reverse_i8_per_channel_lens", "reverse", 8, QuantType.QInt8, True, True, [6, 2, 4], {}),
        ("bidirectional_i8_per_channel_lens_states", "bidirectional", 16, QuantType.QInt8, True,
         True, [3, 6, 0], {}),
        ("bidirectional_u8_per_tensor", "bidirectional", 8, QuantType.QUInt8, False, False, None,
         {}),
        ("forward_i8_clip_input_forget_lens", "forward", 8, QuantType.QInt8, True, True,
         [5, 1, 6], {"clip": 2.0, "input_forget": 1}),
    ]
    quantised, floats = {}, {}
    for name, direction, hidden, wtype, per_channel, states, lens, attrs in specs:
        d = shapes[direction]
        consts = [("W", rng.standard_normal((d, 4 * hidden, inp)).astype(np.float32) * 0.5),
                  ("R", rng.standard_normal((d, 4 * hidden, hidden)).astype(np.float32) * 0.5),
                  ("B", rng.standard_normal((d, 8 * hidden)).astype(np.float32) * 0.5)]
        names = ["x", "W", "R", "B"]
        graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])]
        if lens is not None:
            consts.append(("lens", np.array(lens, np.int32)))
        names.append("lens" if lens is not None else "")
        for state in ("h0", "c0"):
            names.append(state if states else "")
            if states:
                graph_inputs.append(
                    helper.make_tensor_value_info(state, TensorProto.FLOAT, [d, batch, hidden]))
        while names[-1] == "":
            names.pop()
        node = helper.make_node("LSTM", names, ["y", "y_h", "y_c"], hidden_size=hidden,
                                direction=direction, **attrs)
        graph = helper.make_graph(
            [node], name, graph_inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "y_h", "y_c")],
            initializer=[numpy_helper.from_array(v, n) for n, v in consts])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
        src, dst = (os.path.join(work, f"{name}{suffix}.onnx") for suffix in ("_float", ""))
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=wtype, per_channel=per_channel)
        quantised[f"dynamic_quantize_lstm_{name}"] = onnx.load(dst)
        floats[f"dynamic_quantize_lstm_{name}"] = model
    return quantised, floats


def optimizer_cases():
    """The operators onnxruntime's graph optimizer writes into a saved model (CPU provider):
    FusedMatMul (and TransposeMatMul) with every transpose and batch move, FusedGemm with the
    activations GemmActivationFusion fuses, and NhwcMaxPool on uint8 and int8."""
    u8, i8 = TensorProto.UINT8, TensorProto.INT8
    fmm = lambda a, b, op="FusedMatMul", **attrs: node_case(op, [("a", a), ("b", b)], **attrs)
    gemm = lambda act, **attrs: node_case(
        "FusedGemm", [("a", [3, 4]), ("b", [5, 4]), ("c", [5])], transB=1, alpha=0.5, beta=2.0,
        activation=act, **attrs)
    pool = lambda dtype, **attrs: node_case("NhwcMaxPool", [("x", [2, 7, 6, 3], dtype)],
                                            out_types=[dtype], **attrs)
    return {
        "fused_matmul_alpha": fmm([2, 3, 4], [4, 5], alpha=0.125),
        "fused_matmul_trans_a_b_broadcast": fmm([2, 1, 4, 3], [3, 5, 4], transA=1, transB=1),
        "fused_matmul_vectors": fmm([4], [4, 5], transA=1, alpha=2.0),
        "fused_matmul_trans_batch_a": fmm([3, 2, 4], [2, 4, 5], transBatchA=1),
        "fused_matmul_trans_batch_a_trans_a": fmm([4, 2, 3], [2, 4, 5], transBatchA=1, transA=1),
        "fused_matmul_trans_batch_b_trans_b": fmm([2, 3, 4], [5, 2, 4], transBatchB=1, transB=1),
        "fused_matmul_trans_batch_both_4d": fmm([3, 2, 2, 4], [4, 2, 2, 5], transBatchA=1,
                                                transBatchB=1, alpha=0.5),
        "transpose_matmul": fmm([2, 4, 3], [2, 4, 5], op="TransposeMatMul", transA=1),
        "fused_gemm_relu": gemm("Relu"),
        "fused_gemm_leaky_relu": gemm("LeakyRelu", activation_alpha=0.2),
        "fused_gemm_sigmoid": gemm("Sigmoid"),
        "fused_gemm_tanh": gemm("Tanh"),
        "fused_gemm_elu": gemm("Elu", activation_alpha=0.7),
        "fused_gemm_selu": gemm("Selu", activation_alpha=1.5, activation_gamma=1.1),
        "fused_gemm_hard_sigmoid": gemm("HardSigmoid", activation_alpha=0.3, activation_beta=0.4),
        "fused_gemm_softplus": gemm("Softplus"),
        "fused_gemm_softsign": gemm("Softsign"),
        "fused_gemm_thresholded_relu": gemm("ThresholdedRelu", activation_alpha=0.3),
        "nhwc_max_pool_u8": pool(u8, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        "nhwc_max_pool_i8_ceil_dilated": pool(i8, kernel_shape=[2, 2], dilations=[2, 1],
                                              ceil_mode=1),
        "nhwc_max_pool_u8_same_upper": pool(u8, kernel_shape=[2, 3], auto_pad="SAME_UPPER"),
    }


CASES.update(optimizer_cases())


LSTM_CASES, FLOAT_LSTMS = lstm_cases()
CASES.update(LSTM_CASES)
# Operators whose onnxruntime kernels requantise with their own float arithmetic: one code apart
# is a rounding tie broken the other way.
ONE_CODE = {n for n in CASES if n.startswith(("qlinear_add", "qlinear_mul", "qlinear_concat",
                                              "qlinear_global"))}


def random_input(rng, dtype, dims):
    """Standard normal floats, or every value of an 8-bit integer type."""
    if dtype == TensorProto.FLOAT:
        return rng.standard_normal(dims).astype(np.float32)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    info = np.iinfo(np_type)
    return rng.integers(info.min, info.max, size=dims, endpoint=True).astype(np_type)


def main():
    rng = np.random.default_rng(0)
    failed = 0
    skipped = 0
    saturating = ort_saturates_u8s8()
    # Case names given on the command line (prefixes) narrow the run.
    chosen = {n: m for n, m in CASES.items() if not sys.argv[1:] or n.startswith(tuple(sys.argv[1:]))}
    for name, model in chosen.items():
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "model.onnx")
            onnx.save(model, path)
            inputs = os.path.join(work, "inputs")
            os.makedirs(inputs)
            feeds = {}
            for vi in model.graph.input:
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
                feeds[vi.name] = random_input(rng, vi.type.tensor_type.elem_type, dims)
                with open(os.path.join(inputs, f"{vi.name}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(feeds[vi.name], vi.name).SerializeToString())
            # One thread: onnxruntime's quantised LSTM quantises each thread's part of the batch
            # on its own; on one thread it quantises the whole batch, as multigather does.
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = lambda m: ort.InferenceSession(m, options, providers=["CPUExecutionProvider"])
            if name in SHARED_BUFFER:
                want = shared_reference_checked(model, feeds)
            elif name in REFERENCE:
                ref_path = os.path.join(work, "reference.onnx")
                onnx.save(REFERENCE[name], ref_path)
                want = session(ref_path).run(None, feeds)
            else:
                want = session(path).run(None, feeds)
            if name in FLOAT_LSTMS:
                # How far the int8 path itself is from the float LSTM, for scale.
                float_path = os.path.join(work, "float.onnx")
                onnx.save(FLOAT_LSTMS[name], float_path)
                exact = session(float_path).run(None, feeds)
                quant_error = max(float(np.max(np.abs(a - b))) for a, b in zip(want, exact))
            out = os.path.join(work, "out")
            run = subprocess.run([BIN, "run", path, "--inputs", inputs, "--output-dir", out],
                                 capture_output=True, text=True)
            problem = run.stderr.strip() if run.returncode else None
            named = [o for o in model.graph.output if o.name]
            worst = 0.0
            for k, w in enumerate(want):
                if problem:
                    break
                t = onnx.TensorProto()
                with open(os.path.join(out, f"output_{k}.pb"), "rb") as f:
                    t.ParseFromString(f.read())
                got = numpy_helper.to_array(t)
                if got.shape == w.shape and got.size:
                    worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - w))))
                atol = 1 if name in ONE_CODE else 1e-5
                if got.shape != w.shape or not np.allclose(got.astype(np.float64), w.astype(np.float64),
                                                        rtol=1e-4, atol=atol):
                    problem = f"output {named[k].name} differs (max |diff| " \
                              f"{np.max(np.abs(got.astype(np.float64) - w)) if got.shape == w.shape else 'shape'})"
            if problem and saturating and uses_u8s8(model):
                skipped += 1
                print(f"skip {name}: onnxruntime sums u8 x s8 products with 16-bit saturation on "
                      f"this CPU, so it is no oracle here ({problem})")
                continue
            failed += bool(problem)
            detail = f": {problem}" if problem else f" (max |diff| {worst:.3g})"
            if name in FLOAT_LSTMS:
                detail += f" [onnxruntime int8 vs float LSTM: {quant_error:.3g}]"
            print(f"{'FAIL' if problem else 'ok  '} {name}{detail}")
    print(f"contrib operators: {len(chosen) - failed - skipped} of {len(chosen)} match onnxruntime"
          + (f", {skipped} skipped (onnxruntime saturates u8 x s8 sums on this CPU)" if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
