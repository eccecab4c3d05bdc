"""Writes an ImageNet classifier of ResNet-50 shape on a 1x3x224x224 image, twice:
DIR/resnet50.onnx (weights as initializers) and DIR/resnet50_ingraph.onnx (weights computed by
the graph).

usage: python scripts/make_resnet.py DIR      (needs onnx, numpy)

The models are generated, not committed: scripts/check_deployed.py runs them, and their
quantised and float16 conversions, against onnxruntime. They are built with onnx.helper from a
fixed numpy seed, so every run writes the same files (opset 17), with the node pattern of a
torchvision export without Conv+BatchNormalization fusion (about 100 MB of float weights):

- stem: Conv 7x7/2 (3 -> 64) + BatchNormalization + Relu, MaxPool 3x3/2 (224 -> 56);
- bottleneck blocks 3-4-6-3 (widths 256, 512, 1024, 2048; inner 64..512): Conv 1x1 + BN + Relu,
  Conv 3x3 (stride 2 in the first block of stages 2-4) + BN + Relu, Conv 1x1 + BN; the first
  block of each stage projects its input (Conv 1x1 with the stride + BN); Add, Relu;
- GlobalAveragePool, Flatten, Gemm (transB=1) to 1000 logits.

Weights are random (He-normal Conv weights, BN statistics near 0 and 1). The last BN of each
block scales by about 0.2 (torchvision's zero_init_residual starts it at 0), so that the residual
branches do not double the activations 16 times over: on ImageNet-normalised noise they keep a
standard deviation of 1-3 in every stage, and the logits one of about 7. The 1000x2048 Gemm weight is a random
125x256 block tiled 8x8 and scaled per row.

resnet50_ingraph.onnx computes the same function, but its weights are not stored as the engine
uses them, as exporters write them without constant folding: every Conv weight is stored in
float16 and `Cast` to float in the graph (the float weights of resnet50.onnx are the same
float16 values), and the Gemm weight is `Mul(Tile(block, [8, 8]), row_scale)`. An engine must
fold these nodes once or recompute them on every run.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

import model_builder

STAGES = [(64, 256, 3, 1), (128, 512, 4, 2), (256, 1024, 6, 2), (512, 2048, 3, 2)]
CLASSES = 1000
TILE = (8, 8)  # the Gemm weight is a (CLASSES/8) x (2048/8) block tiled this many times


class Builder(model_builder.Builder):
    def __init__(self, ingraph):
        super().__init__(seed=0)
        self.ingraph = ingraph

    def conv(self, x, cin, cout, k, stride=1):
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        # float16 values in both variants, so that the two compute the same function.
        w = w.astype(np.float16)
        if self.ingraph:
            weight = self.node("Cast", [self.const("w16", w)], to=TensorProto.FLOAT)
        else:
            weight = self.const("w", w.astype(np.float32))
        return self.node("Conv", [x, weight], kernel_shape=[k, k], strides=[stride, stride],
                         pads=[k // 2] * 4)

    def bn(self, x, c, gain=1.0):
        scale = self.const("gamma", (gain * (1.0 + 0.1 * self.rng.standard_normal(c))).astype(np.float32))
        bias = self.const("beta", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const("mean", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const("var", (1.0 + 0.1 * self.rng.random(c)).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def conv_bn_relu(self, x, cin, cout, k, stride=1):
        return self.node("Relu", [self.bn(self.conv(x, cin, cout, k, stride), cout)])

    def bottleneck(self, x, cin, mid, cout, stride):
        y = self.conv_bn_relu(x, cin, mid, 1)
        y = self.conv_bn_relu(y, mid, mid, 3, stride)
        y = self.bn(self.conv(y, mid, cout, 1), cout, gain=0.2)
        if stride != 1 or cin != cout:
            x = self.bn(self.conv(x, cin, cout, 1, stride), cout)
        return self.node("Relu", [self.node("Add", [x, y])])

    def fc_weight(self, cin, cout):
        """The [cout, cin] Gemm weight: a random block tiled TILE times, scaled per row."""
        block = (self.rng.standard_normal((cout // TILE[0], cin // TILE[1])) / np.sqrt(cin)).astype(np.float32)
        row_scale = (1.0 + 0.2 * self.rng.standard_normal((cout, 1))).astype(np.float32)
        if self.ingraph:
            tiled = self.node("Tile", [self.const("block", block), self.const("repeats", np.array(TILE, np.int64))])
            return self.node("Mul", [tiled, self.const("row_scale", row_scale)])
        return self.const("fc_w", np.tile(block, TILE) * row_scale)


def build(ingraph):
    b = Builder(ingraph)
    x = b.conv_bn_relu("image", 3, 64, 7, stride=2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for mid, cout, blocks, stride in STAGES:
        for i in range(blocks):
            x = b.bottleneck(x, cin, mid, cout, stride if i == 0 else 1)
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    weight = b.fc_weight(cin, CLASSES)
    bias = b.const("fc_b", (0.01 * b.rng.standard_normal(CLASSES)).astype(np.float32))
    b.nodes.append(helper.make_node("Gemm", [x, weight, bias], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        b.nodes, "resnet50_ingraph" if ingraph else "resnet50",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])],
        b.inits)
    return model_builder.checked_model(graph)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, ingraph in (("resnet50", False), ("resnet50_ingraph", True)):
        path = os.path.join(sys.argv[1], f"{name}.onnx")
        onnx.save(build(ingraph), path)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
