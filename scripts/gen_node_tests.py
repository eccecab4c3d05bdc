"""Writes the ONNX backend node tests in the test-data layout that `multigather test` runs:
OUT/<test>/model.onnx and OUT/<test>/test_data_set_N/{input,output}_K.pb.

usage: python scripts/gen_node_tests.py OUT [SUBSTRING ...]

The cases come from the installed onnx package (onnx.backend.test.case.node), so the suite
follows the onnx version in use. With substrings, only tests whose name contains one of them are
written. Sequences and optionals are written as serialized `SequenceProto` / `OptionalProto`
(`numpy_helper.from_list` / `from_optional`, as onnx's own `backend-test-tools generate-data`
does); cases with map inputs or outputs are left out. Prints the number of tests written.
"""
import os
import sys
import warnings

import numpy as np
import onnx.backend.test.case.node as node_cases
from onnx import TensorProto, numpy_helper


def serialize(value, name, decl):
    """A test value as the serialized proto its declared type `decl` (a TypeProto) calls for:
    SequenceProto, OptionalProto or TensorProto; TypeError when it is none of them."""
    kind = decl.WhichOneof("value")
    if kind == "sequence_type":
        return numpy_helper.from_list(list(value), name).SerializeToString()
    if kind == "optional_type":
        return numpy_helper.from_optional(value, name).SerializeToString()
    if kind != "tensor_type":
        raise TypeError(f"{name} is a {kind}")
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return numpy_helper.from_array(np.asarray(value), name).SerializeToString()
    raise TypeError(f"{name} is not a tensor")


def files_of(case):
    """The files of one test directory, or None when a value is a map (or of no known type)."""
    graph = case.model.graph
    kinds = ("tensor_type", "sequence_type", "optional_type")
    if any(v.type.WhichOneof("value") not in kinds for v in [*graph.input, *graph.output]):
        return None
    files = {"model.onnx": case.model.SerializeToString()}
    for n, (inputs, outputs) in enumerate(case.data_sets):
        for kind, values, decls in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for k, value in enumerate(values):
                try:
                    blob = serialize(value, decls[k].name, decls[k].type)
                    files[f"test_data_set_{n}/{kind}_{k}.pb"] = blob
                except (TypeError, ValueError, AttributeError, IndexError):
                    return None
    return files


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out, wanted = sys.argv[1], [s.lower() for s in sys.argv[2:]]
    warnings.simplefilter("ignore")
    written = 0
    for case in node_cases.collect_testcases(None):
        if wanted and not any(w in case.name.lower() for w in wanted):
            continue
        files = files_of(case)
        if files is None:
            continue
        for rel, blob in files.items():
            path = os.path.join(out, case.name, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(blob)
        written += 1
    print(written)


if __name__ == "__main__":
    main()
