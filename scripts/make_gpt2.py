"""Writes a GPT-2-style decoder (no past state): DIR/gpt2_b2s16.onnx.

usage: python scripts/make_gpt2.py DIR      (needs onnx, numpy)

Generated from a fixed seed, not committed (scripts/check_fused.py fuses it with onnxruntime's
transformer optimizer). The node pattern is what a PyTorch export of Hugging Face's GPT-2
(transformers >= 4.27) has, so that `optimize_model(model_type='gpt2')` fuses it:

- token and position embeddings (`Gather`), then per layer `LayerNormalization`;
- attention: `Reshape` to rows, `Gemm` (c_attn), `Reshape`, `Split` into Q, K, V, heads by
  `Reshape` + `Transpose` (K transposed for the product), `MatMul`, `Div` by sqrt(head), the causal
  mask sliced out of a constant lower-triangular table by the key and query lengths (`Shape`,
  `Slice`, `Squeeze`, `Sub`, `Unsqueeze`, `Slice`, `Slice`) and applied by `Where`, `Softmax`,
  `MatMul` with V, `Transpose`, `Reshape`, `Gemm` (c_proj), residual `Add`;
- a tanh-approximated GELU feed-forward (`Gemm`s and `Pow`, `Mul`, `Add`, `Tanh`), residual `Add`;
- a final `LayerNormalization` and the tied output projection to logits.
"""

import numpy as np
from onnx import TensorProto, helper

import model_builder

BATCH, SEQ = 2, 16
VOCAB, HIDDEN, HEADS, LAYERS, MAX_POS = 96, 64, 4, 2, 32
HEAD = HIDDEN // HEADS


class Builder(model_builder.Builder):
    def weight(self, prefix, shape, scale=0.1):
        return self.const(prefix, (scale * self.rng.standard_normal(shape)).astype(np.float32))

    def i64(self, prefix, values):
        return self.const(prefix, np.array(values, dtype=np.int64))

    def layer_norm(self, x):
        gamma = self.const("gamma", (1 + 0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32))
        return self.node("LayerNormalization", [x, gamma, self.weight("beta", (HIDDEN,))],
                         axis=-1, epsilon=1e-5)

    def conv1d(self, x, cin, cout):
        """Hugging Face's Conv1D: rows through a Gemm, then back to (B, S, cout)."""
        rows = self.node("Reshape", [x, self.i64("shape", [-1, cin])])
        y = self.node("Gemm", [rows, self.weight("w", (cin, cout)), self.weight("b", (cout,))])
        return self.node("Reshape", [y, self.i64("shape", [BATCH, SEQ, cout])])


def attention(b, x):
    qkv = b.conv1d(x, HIDDEN, 3 * HIDDEN)
    q, k, v = b.node("Split", [qkv, b.i64("split", [HIDDEN] * 3)], n_out=3, axis=2)

    def heads(t, perm):
        t = b.node("Reshape", [t, b.i64("shape", [BATCH, SEQ, HEADS, HEAD])])
        return b.node("Transpose", [t], perm=perm)

    q, k, v = heads(q, [0, 2, 1, 3]), heads(k, [0, 2, 3, 1]), heads(v, [0, 2, 1, 3])
    scores = b.node("Div", [b.node("MatMul", [q, k]), b.const("scale", np.float32(np.sqrt(HEAD)))])
    # causal = bias[:, :, key_len - query_len : key_len, :key_len]
    shape = b.node("Shape", [scores])
    key_len = b.node("Squeeze", [b.node("Slice", [shape, b.i64("s", [3]), b.i64("e", [4]),
                                                  b.i64("a", [0])]), b.i64("a", [0])])
    query_len = b.node("Squeeze", [b.node("Slice", [b.node("Shape", [q]), b.i64("s", [2]),
                                                    b.i64("e", [3]), b.i64("a", [0])]),
                                   b.i64("a", [0])])
    start = b.node("Unsqueeze", [b.node("Sub", [key_len, query_len]), b.i64("a", [0])])
    end = b.node("Unsqueeze", [key_len, b.i64("a", [0])])
    table = b.const("bias", np.tril(np.ones((MAX_POS, MAX_POS), bool))[None, None])
    rows = b.node("Slice", [table, start, end, b.i64("a", [2])])
    causal = b.node("Slice", [rows, b.i64("s", [0]), end, b.i64("a", [3])])
    masked = b.node("Where", [causal, scores, b.const("min", np.float32(-3.4028234663852886e38))])
    probs = b.node("Softmax", [masked], axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.i64("shape", [BATCH, SEQ, HIDDEN])])
    return b.conv1d(ctx, HIDDEN, HIDDEN)


def mlp(b, x):
    h = b.conv1d(x, HIDDEN, 4 * HIDDEN)
    f = lambda v: b.const("c", np.float32(v))
    cube = b.node("Mul", [b.node("Pow", [h, f(3.0)]), f(0.044715)])
    inner = b.node("Mul", [b.node("Add", [h, cube]), f(np.sqrt(2.0 / np.pi))])
    gelu = b.node("Mul", [b.node("Mul", [h, f(0.5)]), b.node("Add", [b.node("Tanh", [inner]), f(1.0)])])
    return b.conv1d(gelu, 4 * HIDDEN, HIDDEN)


def build():
    b = Builder(seed=1)
    wte = b.weight("wte", (VOCAB, HIDDEN))
    words = b.node("Gather", [wte, "input_ids"], axis=0)
    positions = b.i64("position_ids", np.arange(SEQ)[None, :])
    x = b.node("Add", [words, b.node("Gather", [b.weight("wpe", (MAX_POS, HIDDEN)), positions],
                                     axis=0)])
    for _ in range(LAYERS):
        x = b.node("Add", [x, attention(b, b.layer_norm(x))])
        x = b.node("Add", [x, mlp(b, b.layer_norm(x))])
    x = b.layer_norm(x)
    logits = b.node("MatMul", [x, b.node("Transpose", [wte], perm=[1, 0])])
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="out"))
    graph = helper.make_graph(
        b.nodes, "gpt2_style_decoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, SEQ])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, SEQ, VOCAB])],
        b.inits)
    return model_builder.checked_model(graph)


def main():
    model_builder.write_main(__doc__, build, f"gpt2_b{BATCH}s{SEQ}.onnx")


if __name__ == "__main__":
    main()
