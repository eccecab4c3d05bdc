"""Shared helpers of the pytest suite: paths in the repository and onnxruntime sessions with
the custom-op library."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import numpy_helper

import multigather

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SUITE = os.path.join(REPO, "tests", "gather_conformance")

# Element types onnxruntime's custom-op API does not carry (onnxruntime refuses the model).
ORT_UNSUPPORTED = {T.COMPLEX64, T.COMPLEX128, T.FLOAT6E2M3, T.FLOAT6E3M2, T.FLOAT8E8M0, T.UINT2, T.INT2}


def session(model, threads=1, library=True):
    """An onnxruntime session on the CPU with `threads` intra-op threads (and the library)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if library:
        options.register_custom_ops_library(multigather.get_library_path())
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def ort_value(tensor: onnx.TensorProto):
    """An onnxruntime input for a TensorProto: a numpy array for strings, else an OrtValue
    allocated by onnxruntime and filled with the tensor's raw bytes (which works for bfloat16,
    float8 and the packed 4-bit types alike)."""
    import ctypes

    import onnxruntime as ort

    if tensor.data_type == T.STRING:
        return numpy_helper.to_array(tensor)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(tensor.dims), tensor.data_type)
    raw = tensor.raw_data
    if raw:
        ctypes.memmove(value.data_ptr(), raw, len(raw))
    return value


def ort_bytes(value, data_type: int) -> bytes:
    """The element bytes of an onnxruntime tensor (packed for sub-byte types, as in a
    TensorProto's raw data), read from its memory: onnxruntime's Python API has no numpy type for
    bfloat16, float8 or the 4-bit types."""
    import ctypes

    count = int(np.prod(value.shape(), dtype=np.int64))
    bits = {T.UINT4: 4, T.INT4: 4, T.FLOAT4E2M1: 4}.get(data_type)
    if bits is None:
        bits = 8 * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    size = (count * bits + 7) // 8
    return ctypes.string_at(value.data_ptr(), size) if size else b""


@pytest.fixture(scope="session")
def ort():
    return pytest.importorskip("onnxruntime")
