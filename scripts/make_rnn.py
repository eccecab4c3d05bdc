"""Writes two recurrent sequence encoders of 64 steps, batch 4, 128 features: DIR/lstm.onnx and
DIR/gru.onnx.

usage: python scripts/make_rnn.py DIR      (needs onnx, numpy)

The models are generated, not committed: scripts/check_deployed.py runs them (and the LSTM
through onnxruntime's dynamic quantisation) against onnxruntime. They are built with onnx.helper
from a fixed numpy seed, so every run writes the same files (opset 17), with the node pattern of
a PyTorch export of a 2-layer `nn.LSTM` / `nn.GRU` (hidden 256, sequence-first, no initial
state) whose second layer is bidirectional:

- input `x` [64, 4, 128];
- layer 1, forward: LSTM (or GRU, linear_before_reset=1 as PyTorch's) -> Y [64, 1, 4, 256],
  Squeeze of the direction axis;
- layer 2, bidirectional on [64, 4, 256] -> Y [64, 2, 4, 256], Transpose + Reshape to the
  outputs `output` [64, 4, 512] and the final hidden states `h_n` [2, 4, 256].

Weights and biases are uniform in +-1/sqrt(256), PyTorch's initialisation.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

import model_builder

SEQ, BATCH, INPUT, HIDDEN = 64, 4, 128, 256
GATES = {"LSTM": 4, "GRU": 3}


class Builder(model_builder.Builder):
    def weight(self, prefix, shape):
        bound = 1.0 / np.sqrt(HIDDEN)
        return self.const(prefix, self.rng.uniform(-bound, bound, shape).astype(np.float32))

    def layer(self, op, x, cin, directions):
        """One recurrent layer of `op` on x [SEQ, BATCH, cin]; returns its outputs Y and Y_h."""
        gates = GATES[op] * HIDDEN
        w = self.weight("W", (directions, gates, cin))
        r = self.weight("R", (directions, gates, HIDDEN))
        bias = self.weight("B", (directions, 2 * gates))
        attrs = {"linear_before_reset": 1} if op == "GRU" else {}
        return self.node(op, [x, w, r, bias], n_out=2, hidden_size=HIDDEN,
                         direction="bidirectional" if directions == 2 else "forward", **attrs)


def build(op):
    b = Builder()
    y, _ = b.layer(op, "x", INPUT, 1)
    y = b.node("Squeeze", [y, b.const("axes", np.array([1], np.int64))])
    y, h = b.layer(op, y, HIDDEN, 2)
    y = b.node("Transpose", [y], perm=[0, 2, 1, 3])
    b.nodes.append(helper.make_node("Reshape", [y, b.const("shape", np.array([SEQ, BATCH, 2 * HIDDEN], np.int64))],
                                    ["output"], name="output"))
    b.nodes.append(helper.make_node("Identity", [h], ["h_n"], name="h_n"))
    graph = helper.make_graph(
        b.nodes, op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, INPUT])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [SEQ, BATCH, 2 * HIDDEN]),
         helper.make_tensor_value_info("h_n", TensorProto.FLOAT, [2, BATCH, HIDDEN])],
        b.inits)
    return model_builder.checked_model(graph)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for op in GATES:
        path = os.path.join(sys.argv[1], f"{op.lower()}.onnx")
        onnx.save(build(op), path)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
