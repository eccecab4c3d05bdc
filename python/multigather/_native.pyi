"""The Rust extension module; use the functions of ``multigather`` instead."""

from typing import Dict, List, Optional, Tuple, Union

Source = Union[bytes, str]

class Error(Exception): ...

def rewrite(
    source: Source,
    ops: Optional[List[str]],
    skip: List[str],
    with_function_body: bool,
    output: Optional[str] = None,
    external_data: Optional[str] = None,
    in_place: bool = False,
) -> Tuple[bytes, str]: ...
def lower(
    source: Source,
    output: Optional[str] = None,
    external_data: Optional[str] = None,
    in_place: bool = False,
) -> Tuple[bytes, str]: ...
def run(source: Source, inputs: List[Tuple[str, bytes, str]]) -> List[Tuple[str, bytes, str]]: ...
def verify(
    original: Source,
    rewritten: Optional[Source],
    inputs: Optional[List[Tuple[str, bytes]]],
    seed: int,
    dims: Dict[str, int],
    max_memory: Optional[int] = None,
) -> str: ...
def main(argv: List[str]) -> int: ...
