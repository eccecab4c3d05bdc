"""Writes a BERT-style sentence encoder at batch 4 x 128 tokens: DIR/transformer_b4s128.onnx.

usage: python scripts/make_transformer.py DIR      (needs onnx, numpy)

The model is generated, not committed: scripts/check_models.py runs it against onnxruntime next
to the silero-vad models and the conv-net. It is built with onnx.helper from a fixed numpy seed,
so every run writes the same file (about 17 MB of float weights, opset 17), with the node
pattern a PyTorch export of a MiniLM-L3 encoder has (hidden 384, 12 heads, FFN 1536, 3 layers):

- embeddings: `Gather` of token ids in a 2048-word table, plus position and token-type
  embeddings (`Gather` of constant ids), `LayerNormalization`;
- the attention mask turned into an additive bias (Unsqueeze twice, Cast, Sub, Mul by -1e4), as
  Hugging Face's `get_extended_attention_mask` exports it;
- per layer: Q/K/V projections (MatMul + Add), heads split by Reshape + Transpose, scores
  (MatMul, Div by sqrt(32), Add of the mask), Softmax, context (MatMul, Transpose, Reshape),
  output projection, residual Add + LayerNormalization; an exact-erf GELU feed-forward
  (Div, Erf, Add, Mul, Mul), residual Add + LayerNormalization;
- mean pooling over the mask (Mul, ReduceSum, Div) and a `Gather` of the first token.
"""

import numpy as np
from onnx import TensorProto, helper

import model_builder

BATCH, SEQ = 4, 128
VOCAB, HIDDEN, HEADS, FFN, LAYERS = 2048, 384, 12, 1536, 3


class Builder(model_builder.Builder):
    def weight(self, prefix, shape, scale=0.05):
        return self.const(prefix, (scale * self.rng.standard_normal(shape)).astype(np.float32))

    def node(self, op, inputs, **attrs):
        name = self.name(op.lower())
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def linear(self, x, cin, cout):
        y = self.node("MatMul", [x, self.weight("w", (cin, cout))])
        return self.node("Add", [y, self.weight("b", (cout,), 0.02)])

    def layer_norm(self, x):
        hidden = self.hidden
        gamma = self.const("gamma", (1 + 0.05 * self.rng.standard_normal(hidden)).astype(np.float32))
        beta = self.weight("beta", (hidden,), 0.02)
        return self.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

    def shape(self, dims):
        return self.const("shape", np.array(dims, dtype=np.int64))


def build(batch=BATCH, seq=SEQ, vocab=VOCAB, hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=LAYERS):
    """The encoder at the given sizes (the defaults are the benchmark's)."""
    BATCH, SEQ, VOCAB, HIDDEN, HEADS, FFN, LAYERS = batch, seq, vocab, hidden, heads, ffn, layers
    HEAD = HIDDEN // HEADS
    b = Builder()
    b.hidden = HIDDEN
    ids, mask = "input_ids", "attention_mask"
    words = b.node("Gather", [b.weight("word_embeddings", (VOCAB, HIDDEN)), ids], axis=0)
    positions = b.const("position_ids", np.arange(SEQ, dtype=np.int64)[None, :])
    pos = b.node("Gather", [b.weight("position_embeddings", (512, HIDDEN)), positions], axis=0)
    types = b.const("token_type_ids", np.zeros((BATCH, SEQ), dtype=np.int64))
    typ = b.node("Gather", [b.weight("token_type_embeddings", (2, HIDDEN)), types], axis=0)
    x = b.layer_norm(b.node("Add", [b.node("Add", [words, pos]), typ]))

    m = b.node("Cast", [mask], to=TensorProto.FLOAT)
    m4 = b.node("Unsqueeze", [mask, b.const("axes", np.array([1], dtype=np.int64))])
    m4 = b.node("Unsqueeze", [m4, b.const("axes", np.array([2], dtype=np.int64))])
    inverted = b.node("Sub", [b.const("one", np.float32(1.0)), b.node("Cast", [m4], to=TensorProto.FLOAT)])
    bias = b.node("Mul", [inverted, b.const("neg", np.float32(-1e4))])

    for _ in range(LAYERS):
        def split_heads(t):
            t = b.node("Reshape", [t, b.shape([BATCH, SEQ, HEADS, HEAD])])
            return b.node("Transpose", [t], perm=[0, 2, 1, 3])

        q, k, v = (split_heads(b.linear(x, HIDDEN, HIDDEN)) for _ in range(3))
        kt = b.node("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.node("Div", [b.node("MatMul", [q, kt]), b.const("scale", np.float32(np.sqrt(HEAD)))])
        probs = b.node("Softmax", [b.node("Add", [scores, bias])], axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, b.shape([BATCH, SEQ, HIDDEN])])
        x = b.layer_norm(b.node("Add", [b.linear(ctx, HIDDEN, HIDDEN), x]))

        h = b.linear(x, HIDDEN, FFN)
        erf = b.node("Erf", [b.node("Div", [h, b.const("sqrt2", np.float32(np.sqrt(2.0)))])])
        gelu = b.node("Mul", [b.node("Mul", [h, b.node("Add", [erf, b.const("one", np.float32(1.0))])]),
                              b.const("half", np.float32(0.5))])
        x = b.layer_norm(b.node("Add", [b.linear(gelu, FFN, HIDDEN), x]))

    m3 = b.node("Unsqueeze", [m, b.const("axes", np.array([2], dtype=np.int64))])
    summed = b.node("ReduceSum", [b.node("Mul", [x, m3]), b.const("axes", np.array([1], dtype=np.int64))],
                    keepdims=0)
    count = b.node("ReduceSum", [m3, b.const("axes", np.array([1], dtype=np.int64))], keepdims=0)
    count = b.node("Max", [count, b.const("tiny", np.float32(1e-9))])
    pooled = b.node("Div", [summed, count])
    first = b.node("Gather", [x, b.const("first", np.int64(0))], axis=1)

    nodes = b.nodes
    nodes.append(helper.make_node("Identity", [pooled], ["sentence_embedding"], name="out0"))
    nodes.append(helper.make_node("Identity", [first], ["cls_token"], name="out1"))
    graph = helper.make_graph(
        nodes,
        "bert_style_encoder",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, [BATCH, SEQ]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, [BATCH, SEQ]),
        ],
        [
            helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [BATCH, HIDDEN]),
            helper.make_tensor_value_info("cls_token", TensorProto.FLOAT, [BATCH, HIDDEN]),
        ],
        b.inits,
    )
    return model_builder.checked_model(graph)


def main():
    model_builder.write_main(__doc__, build, f"transformer_b{BATCH}s{SEQ}.onnx")


if __name__ == "__main__":
    main()
