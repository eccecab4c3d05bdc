"""The GatherMultiaxis conformance suite through onnxruntime with the custom-op library: every
test gives the recorded output bit for bit, and every expected failure fails with the message of
its manifest line. Types onnxruntime's custom-op API does not carry are skipped, by name."""

import glob
import os

import onnx
import pytest
from onnx import numpy_helper

from conftest import ORT_UNSUPPORTED, SUITE, ort_bytes, ort_value, session

TESTS = sorted(glob.glob(os.path.join(SUITE, "node", "test_*")))
FAILURES = [
    line.split("\t", 1)
    for line in open(os.path.join(SUITE, "expected_failures.txt")).read().splitlines()
    if line and not line.startswith("#")
]


def load(directory):
    model = onnx.load(os.path.join(directory, "model.onnx"))
    data = os.path.join(directory, "test_data_set_0")
    inputs = [onnx.load_tensor(os.path.join(data, f"input_{k}.pb")) for k in range(2)]
    return model, inputs, data


def feeds(model, inputs):
    return {i.name: ort_value(t) for i, t in zip(model.graph.input, inputs)}


def test_the_suite_is_there():
    assert len(TESTS) >= 100 and len(FAILURES) >= 5


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("directory", TESTS, ids=os.path.basename)
def test_conformance(ort, directory, threads):
    model, inputs, data = load(directory)
    dtype = inputs[0].data_type
    if dtype in ORT_UNSUPPORTED:
        with pytest.raises(Exception, match="is invalid"):
            session(model)
        pytest.skip(f"onnxruntime's custom-op API does not carry {onnx.TensorProto.DataType.Name(dtype)}")
    s = session(model, threads)
    want = onnx.load_tensor(os.path.join(data, "output_0.pb"))
    if dtype == onnx.TensorProto.STRING:
        got = s.run(None, feeds(model, inputs))[0]
        expected = numpy_helper.to_array(want)
        assert got.shape == expected.shape
        text = [v.decode() if isinstance(v, bytes) else str(v) for v in expected.flat]
        assert [str(v) for v in got.flat] == text
        return
    got = s.run_with_ort_values(None, feeds(model, inputs))[0]
    assert list(got.shape()) == list(want.dims)
    assert ort_bytes(got, dtype) == want.raw_data


@pytest.mark.parametrize("name,message", FAILURES, ids=[f[0] for f in FAILURES])
def test_expected_failure(ort, name, message):
    model, inputs, _ = load(os.path.join(SUITE, "expected_failures", name))
    expected = f"node '{name}' (multigather.GatherMultiaxis): {message}"
    with pytest.raises(Exception) as error:
        session(model).run_with_ort_values(None, feeds(model, inputs))
    assert expected in str(error.value)
