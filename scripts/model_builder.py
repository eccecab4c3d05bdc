"""What the model generators share: a graph under construction with a seeded random source.

`Builder` numbers every name it makes (`conv_3`, `w_4`, ...), so a generator that adds the
same nodes in the same order writes the same file on every run.
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Builder:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, prefix, value):
        """An initializer holding `value`; returns its name."""
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def node(self, op, inputs, n_out=1, **attrs):
        """A node of `op`; returns its output name (a list of names when `n_out > 1`)."""
        name = self.name(op.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]


def checked_model(graph):
    """An opset-17 model of `graph`, checked in full."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def write_main(doc, build, filename):
    """The command line of a generator: `script DIR` writes `build()` to DIR/filename."""
    if len(sys.argv) != 2:
        sys.exit(doc)
    os.makedirs(sys.argv[1], exist_ok=True)
    onnx.save(build(), os.path.join(sys.argv[1], filename))
