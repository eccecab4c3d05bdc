"""Type hints of the multigather package (see ``__init__.py`` for the docs and examples)."""

import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx

ModelLike = Union[onnx.ModelProto, bytes, str, os.PathLike[str]]

class Error(Exception):
    """A model, file or tensor that multigather rejects; the message is one line."""

def rewrite(
    model: ModelLike,
    *,
    ops: Optional[Sequence[str]] = None,
    skip: Sequence[str] = (),
    with_function_body: bool = False,
    output: Optional[Union[str, os.PathLike[str]]] = None,
    external_data: Optional[str] = None,
) -> onnx.ModelProto: ...
def lower(
    model: ModelLike,
    *,
    output: Optional[Union[str, os.PathLike[str]]] = None,
    external_data: Optional[str] = None,
) -> onnx.ModelProto: ...
def run(model: ModelLike, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]: ...
@dataclass(frozen=True)
class OutputComparison:
    name: str
    dtype: str
    shape: List[int]
    identical: bool
    mismatches: int
    max_abs_diff: Optional[float]
    problem: Optional[str]

@dataclass(frozen=True)
class VerifyReport:
    identical: bool
    rewritten_nodes: int
    outputs: List[OutputComparison]
    def __bool__(self) -> bool: ...

def verify(
    original: ModelLike,
    rewritten: Optional[ModelLike] = None,
    inputs: Optional[Mapping[str, np.ndarray]] = None,
    random: bool = False,
    seed: int = 0,
    dims: Optional[Mapping[str, int]] = None,
) -> VerifyReport: ...
def get_library_path() -> str: ...
