"""multigather: one ``GatherMultiaxis`` operator for every ONNX gather.

Rewrite a model's ``Gather`` / ``GatherElements`` / ``GatherND`` nodes into
``multigather.GatherMultiaxis``, prove the rewrite bit for bit, lower it back to standard ONNX,
and run rewritten models in onnxruntime with the custom-op library this package ships:

>>> import multigather, onnx, onnxruntime as ort             # doctest: +SKIP
>>> rewritten = multigather.rewrite("model.onnx")              # doctest: +SKIP
>>> multigather.verify("model.onnx", rewritten, random=True).identical   # doctest: +SKIP
True
>>> options = ort.SessionOptions()                             # doctest: +SKIP
>>> options.register_custom_ops_library(multigather.get_library_path())  # doctest: +SKIP
>>> session = ort.InferenceSession(rewritten.SerializeToString(), options)  # doctest: +SKIP

Models are given as an ``onnx.ModelProto``, serialized bytes, or a path. Give a path for models
with external data or over 2 GiB: the file is memory-mapped and its external data stays where it
is (pass ``output=`` to write the result next to it, ``external_data=`` to move the weights).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import numpy_helper

from . import _native
from ._native import Error

__all__ = [
    "DimChoice",
    "IfBranches",
    "Error",
    "InputChoice",
    "OutputComparison",
    "VerifyReport",
    "get_library_path",
    "lower",
    "rewrite",
    "run",
    "verify",
]

ModelLike = Union[onnx.ModelProto, bytes, str, "os.PathLike[str]"]


def _source(model: ModelLike) -> Union[bytes, str]:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise TypeError(f"expected an onnx.ModelProto, bytes or a path, not {type(model).__name__}")


def _result(data: bytes) -> onnx.ModelProto:
    # The model as it was saved (when saved): external data stays referenced, not loaded.
    return onnx.load_from_string(data)


def rewrite(
    model: ModelLike,
    *,
    ops: Optional[Sequence[str]] = None,
    skip: Sequence[str] = (),
    with_function_body: bool = False,
    output: Optional[Union[str, "os.PathLike[str]"]] = None,
    external_data: Optional[str] = None,
    in_place: bool = False,
) -> onnx.ModelProto:
    """Rewrites every ``Gather``, ``GatherElements`` and ``GatherND`` into ``GatherMultiaxis``.

    ``ops`` limits the rewrite to some kinds (``"Gather"``, ``"GatherElements"``,
    ``"GatherND"``); ``skip`` leaves nodes whose name contains one of the strings untouched;
    ``with_function_body`` attaches the lowering as a model-local function so runtimes without
    the operator still run the model. With ``output`` the model is also saved there (external
    data kept in place, or moved to ``external_data`` beside it), and the model returned is the
    one saved; an ``output`` that is the input file is refused unless ``in_place`` is true.

    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    >>> graph = helper.make_graph([node], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
    ...      helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> out = rewrite(model)
    >>> [n.op_type for n in out.graph.node][-1]
    'GatherMultiaxis'
    """
    data, _report = _native.rewrite(
        _source(model),
        None if ops is None else list(ops),
        list(skip),
        with_function_body,
        None if output is None else os.fspath(output),
        external_data,
        in_place,
    )
    return _result(data)


def lower(
    model: ModelLike,
    *,
    output: Optional[Union[str, "os.PathLike[str]"]] = None,
    external_data: Optional[str] = None,
    in_place: bool = False,
) -> onnx.ModelProto:
    """Replaces every ``GatherMultiaxis`` by standard ONNX operators.

    ``output``, ``external_data`` and ``in_place`` are as for :func:`rewrite`.

    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)
    >>> graph = helper.make_graph([node], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
    ...      helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> "GatherMultiaxis" in {n.op_type for n in lower(rewrite(model)).graph.node}
    False
    """
    data, _summary = _native.lower(
        _source(model), None if output is None else os.fspath(output), external_data, in_place
    )
    return _result(data)


def _encode(inputs: Mapping[str, np.ndarray]) -> List[tuple]:
    return [
        (name, numpy_helper.from_array(np.asarray(value), name).SerializeToString())
        for name, value in inputs.items()
    ]


def _encode_values(inputs: Mapping[str, Any]) -> List[tuple]:
    """``(name, bytes, kind)`` for the native ``run``: a list is a sequence of tensors, ``None``
    an empty optional, anything else a tensor (a tensor or a list fed to an input declared
    optional is a present optional)."""
    encoded = []
    for name, value in inputs.items():
        if value is None:
            encoded.append((name, numpy_helper.from_optional(None, name).SerializeToString(),
                            "optional"))
        elif isinstance(value, list):
            tensors = [np.asarray(v) for v in value]
            encoded.append((name, numpy_helper.from_list(tensors, name).SerializeToString(),
                            "sequence"))
        else:
            encoded.append((name, numpy_helper.from_array(np.asarray(value), name)
                            .SerializeToString(), "tensor"))
    return encoded


def _decode_value(data: bytes, kind: str) -> Any:
    """An output of the native ``run`` as Python values (see ``run``)."""
    if kind == "maps":
        return _sequence_of_maps(data)
    if kind == "sequence":
        return numpy_helper.to_list(onnx.SequenceProto.FromString(data))
    if kind == "optional":
        return numpy_helper.to_optional(onnx.OptionalProto.FromString(data))
    return numpy_helper.to_array(onnx.TensorProto.FromString(data))


def run(model: ModelLike, inputs: Mapping[str, Any]) -> Dict[str, Any]:
    """Runs a model (original or rewritten) in multigather's reference interpreter.

    Inputs are numpy arrays, lists of arrays for sequences, and ``None`` for an empty optional.
    Outputs are numpy arrays, lists of arrays for sequences, the held value or ``None`` for an
    optional, and ``ZipMap``'s sequence of maps a list of dicts (class label to float
    probability), as onnxruntime returns them.

    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    >>> graph = helper.make_graph([node], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
    ...      helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> run(rewrite(model), {"x": np.array([1, 2, 3], np.float32), "i": np.array([2, -3])})["y"]
    array([3., 1.], dtype=float32)
    >>> zipmap = helper.make_node("ZipMap", ["p"], ["z"], domain="ai.onnx.ml",
    ...     classlabels_strings=["no", "yes"])
    >>> seq_of_maps = helper.make_sequence_type_proto(
    ...     helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    >>> graph = helper.make_graph([zipmap], "g",
    ...     [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 2])],
    ...     [helper.make_value_info("z", seq_of_maps)])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
    ...     helper.make_opsetid("ai.onnx.ml", 1)])
    >>> run(model, {"p": np.array([[0.25, 0.75]], np.float32)})["z"]
    [{'no': 0.25, 'yes': 0.75}]
    >>> split = helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0)
    >>> at = helper.make_node("SequenceAt", ["parts", "k"], ["last"])
    >>> seq = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    >>> graph = helper.make_graph([split, at], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
    ...      helper.make_tensor_value_info("k", TensorProto.INT64, [])],
    ...     [seq, helper.make_tensor_value_info("last", TensorProto.FLOAT, None)])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> out = run(model, {"x": np.array([1, 2, 3], np.float32), "k": np.array(-1)})
    >>> out["parts"], out["last"]
    ([array([1.], dtype=float32), array([2.], dtype=float32), array([3.], dtype=float32)], array([3.], dtype=float32))
    """
    outputs = _native.run(_source(model), _encode_values(inputs))
    return {name: _decode_value(data, kind) for name, data, kind in outputs}


def _sequence_of_maps(data: bytes) -> List[Dict[Any, float]]:
    """A serialized SequenceProto of MapProtos as onnxruntime returns ZipMap's output: a list of
    dicts, string keys as ``str``, int keys as ``int``, values as ``float``."""
    sequence = onnx.SequenceProto.FromString(data)
    maps = []
    for m in sequence.map_values:
        keys = ([k.decode("utf-8") for k in m.string_keys]
                if m.key_type == onnx.TensorProto.STRING else [int(k) for k in m.keys])
        values = [float(numpy_helper.to_array(t)) for t in m.values.tensor_values]
        maps.append(dict(zip(keys, values)))
    return maps


@dataclass(frozen=True)
class OutputComparison:
    """How one output of the two runs compares."""

    name: str
    dtype: str
    shape: List[int]
    identical: bool
    mismatches: int
    max_abs_diff: Optional[float]
    problem: Optional[str]


@dataclass(frozen=True)
class InputChoice:
    """One input of the runs: given (``drawn`` false), or drawn with which shape and range."""

    name: str
    dtype: str
    shape: List[int]
    drawn: bool
    range: Optional[str]
    reason: Optional[str]


@dataclass(frozen=True)
class DimChoice:
    """The size chosen for one symbolic dimension, and where it came from."""

    name: str
    size: int
    source: str


@dataclass(frozen=True)
class IfBranches:
    """The branches of one ``If`` of the main graph that the proof ran, each with the inputs it
    ran on (``None``: no draw took it), and why a branch a draw takes did not run."""

    node: str
    then_branch: Optional[str]
    else_branch: Optional[str]
    failed: Optional[str]


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify`: ``identical`` is true when every output agrees bit for bit.

    The fields are those of ``multigather verify --json``: ``inputs`` says how each input was
    chosen, ``dims`` the sizes of the symbolic dimensions of the drawn ones and ``branches``
    which branches of the main graph's ``If`` nodes ran."""

    identical: bool
    rewritten_nodes: int
    outputs: List[OutputComparison] = field(default_factory=list)
    inputs: List[InputChoice] = field(default_factory=list)
    dims: List[DimChoice] = field(default_factory=list)
    branches: List[IfBranches] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.identical


def verify(
    original: ModelLike,
    rewritten: Optional[ModelLike] = None,
    inputs: Optional[Mapping[str, np.ndarray]] = None,
    random: bool = False,
    seed: int = 0,
    dims: Optional[Mapping[str, int]] = None,
    max_memory: Optional[int] = None,
) -> VerifyReport:
    """Runs ``original`` and ``rewritten`` on the same inputs and compares every output bit for bit.

    This is ``multigather verify``: one library function proves for both, with the same checks,
    draws, size search, memory budget (``max_memory`` bytes; by default the machine's memory)
    and comparison, so both give the same verdict on the same inputs. Without ``rewritten``
    the original is rewritten in memory. Inputs are ``inputs``; the ones not given are drawn
    (``random=True`` or no ``inputs``; gather indices in range) with ``seed`` and the sizes of
    symbolic dimensions in ``dims``, larger sizes searched while the original fails on them.

    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("GatherND", ["x", "i"], ["y"])
    >>> graph = helper.make_graph([node], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
    ...      helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> report = verify(model, random=True, seed=1)
    >>> report.identical, report.rewritten_nodes, report.outputs[0].mismatches
    (True, 1, 0)
    """
    if inputs is not None and random:
        raise ValueError("give either inputs or random=True, not both")
    report = json.loads(
        _native.verify(
            _source(original),
            None if rewritten is None else _source(rewritten),
            None if inputs is None else _encode(inputs),
            seed,
            dict(dims or {}),
            max_memory,
        )
    )
    return VerifyReport(
        identical=report["identical"],
        rewritten_nodes=report["rewritten_nodes"],
        outputs=[OutputComparison(**o) for o in report["outputs"]],
        inputs=[InputChoice(**i) for i in report["inputs"]],
        dims=[DimChoice(**d) for d in report["dims"]],
        branches=[IfBranches(**b) for b in report["branches"]],
    )


def get_library_path() -> str:
    """The onnxruntime custom-op library that runs ``multigather.GatherMultiaxis``.

    Register it with ``SessionOptions.register_custom_ops_library(get_library_path())``, as
    with onnxruntime-extensions. The file is this package's extension module, which exports
    onnxruntime's ``RegisterCustomOps`` entry point.

    >>> os.path.isfile(get_library_path())
    True
    """
    return os.path.abspath(_native.__file__)


def _console() -> None:
    """The ``multigather`` console script: the command line of the Rust binary."""
    sys.exit(_native.main(["multigather", *sys.argv[1:]]))
