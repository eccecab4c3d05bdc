"""Writes a typical detection-style conv-net on a 1x3x320x320 image: DIR/convnet320.onnx.

usage: python scripts/make_convnet.py DIR      (needs onnx, numpy)

The model is generated, not committed: scripts/check_models.py times it against onnxruntime
(single-threaded) next to the silero-vad models. It is built with onnx.helper from a fixed numpy
seed, so every run writes the same file (about 1.5 MB of float weights, opset 17):

- stem: a strided 3x3 Conv + BatchNormalization + Relu, then MaxPool 3x3/2 (320 -> 80);
- a residual block (Conv+BN+Relu, Conv+BN, Add, Relu);
- MobileNet-style blocks: 1x1 expand + HardSwish, depthwise 3x3 (stride 1 or 2) + HardSwish,
  1x1 project with the bias folded in (80 -> 40 -> 20 -> 10);
- a small FPN: 1x1 lateral convs, Resize (nearest, x2) of the coarse map, Concat, 3x3 fuse conv;
- a head per scale (Conv + Sigmoid), reshaped and transposed to [1, anchors, 4 + classes] and
  concatenated over the scales;
- gathers on the outputs, as a post-processing would write them: `Gather` of the score columns
  (axis 2), `GatherElements` of the best class per anchor, `GatherND` of a few fixed anchors.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import model_builder

CLASSES = 3
ANCHORS = 3  # per cell
OUT = 4 + CLASSES


class Builder(model_builder.Builder):
    def conv(self, x, cin, cout, k, stride=1, group=1, bias=True):
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in))
        inputs = [x, self.const("w", w.astype(np.float32))]
        if bias:
            inputs.append(self.const("b", (0.05 * self.rng.standard_normal(cout)).astype(np.float32)))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[k // 2] * 4, group=group)

    def bn(self, x, c):
        scale = self.const("gamma", (1.0 + 0.1 * self.rng.standard_normal(c)).astype(np.float32))
        bias = self.const("beta", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const("mean", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const("var", (1.0 + 0.1 * self.rng.random(c)).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def conv_bn_relu(self, x, cin, cout, k, stride=1):
        return self.node("Relu", [self.bn(self.conv(x, cin, cout, k, stride, bias=False), cout)])

    def residual(self, x, c):
        y = self.conv_bn_relu(x, c, c, 3)
        y = self.bn(self.conv(y, c, c, 3, bias=False), c)
        return self.node("Relu", [self.node("Add", [x, y])])

    def mobile(self, x, cin, cout, expand, stride):
        mid = cin * expand
        y = self.node("HardSwish", [self.conv(x, cin, mid, 1)])
        y = self.node("HardSwish", [self.conv(y, mid, mid, 3, stride, group=mid)])
        y = self.conv(y, mid, cout, 1)
        if stride == 1 and cin == cout:
            y = self.node("Add", [x, y])
        return y

    def head(self, x, c):
        """Conv + Sigmoid to [1, cells * ANCHORS, OUT]."""
        y = self.node("Sigmoid", [self.conv(x, c, ANCHORS * OUT, 1)])
        y = self.node("Reshape", [y, self.const("shape", np.array([1, ANCHORS, OUT, -1], np.int64))])
        y = self.node("Transpose", [y], perm=[0, 1, 3, 2])
        return self.node("Reshape", [y, self.const("shape", np.array([1, -1, OUT], np.int64))])


def build():
    b = Builder(seed=0)
    x = "image"
    # Stem: 320 -> 160 -> 80.
    x = b.conv_bn_relu(x, 3, 16, 3, stride=2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.residual(x, 16)
    # 80 -> 40 -> 20 -> 10.
    x = b.mobile(x, 16, 24, 3, 1)
    c3 = b.mobile(b.mobile(x, 24, 32, 4, 2), 32, 32, 4, 1)   # 40x40
    c4 = b.mobile(b.mobile(c3, 32, 48, 4, 2), 48, 48, 4, 1)  # 20x20
    c5 = b.mobile(c4, 48, 64, 4, 2)                          # 10x10
    # FPN: upsample the coarse map x2 (nearest) and fuse with the finer one.
    p5 = b.conv(c5, 64, 32, 1)
    up = b.node("Resize", [p5, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))],
                mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    p4 = b.node("Concat", [b.conv(c4, 48, 32, 1), up], axis=1)
    p4 = b.conv_bn_relu(p4, 64, 32, 3)
    up = b.node("Resize", [p4, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))],
                mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    p3 = b.node("Concat", [b.conv(c3, 32, 32, 1), up], axis=1)
    p3 = b.conv_bn_relu(p3, 64, 32, 3)
    # Heads on the three scales, concatenated over anchors: [1, 3 * (1600 + 400 + 100), OUT].
    det = b.node("Concat", [b.head(p3, 32), b.head(p4, 32), b.head(p5, 32)], axis=1)
    # Post-processing gathers.
    scores = b.node("Gather", [det, b.const("cols", np.arange(4, OUT, dtype=np.int64))], axis=2)
    best = b.node("ArgMax", [scores], axis=2, keepdims=1)
    best_score = b.node("GatherElements", [scores, best], axis=2)
    picks = b.const("picks", np.array([[0, 0], [0, 17], [0, 4200], [0, 6299]], np.int64))
    picked = b.node("GatherND", [det, picks])
    graph = helper.make_graph(
        b.nodes, "convnet320",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 320, 320])],
        [helper.make_tensor_value_info(det, TensorProto.FLOAT, [1, 6300, OUT]),
         helper.make_tensor_value_info(best_score, TensorProto.FLOAT, [1, 6300, 1]),
         helper.make_tensor_value_info(picked, TensorProto.FLOAT, [4, OUT])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="multigather make_convnet.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/make_convnet.py DIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    path = os.path.join(sys.argv[1], "convnet320.onnx")
    onnx.save(build(), path)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
