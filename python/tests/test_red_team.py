"""Regressions of the attacks on the faces of the project: the onnxruntime library reads
attributes as the interpreter does and types its output for subgraphs, and the Python entry
points keep the CLI's promises about outputs."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import multigather
from conftest import session
from test_api import gather_model


def multiaxis_model(**attrs):
    """One GatherMultiaxis node on x[4, 5] with indices i[3, 1], attributes as given."""
    node = helper.make_node("GatherMultiaxis", ["x", "i"], ["y"], name="pick", domain="multigather")
    node.attribute.extend(attrs.values())
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 13), helper.make_opsetid("multigather", 1)])


def attribute(name, value):
    return helper.make_attribute(name, value)


@pytest.mark.parametrize("axes, mode, message", [
    (attribute("axes", 0), None, "attribute 'axes': expected ints, found int"),
    (attribute("axes", [0.0]), None, "attribute 'axes': expected ints, found floats"),
    (attribute("axes", numpy_helper.from_array(np.array([0], dtype=np.int64))), None,
     "attribute 'axes': expected ints, found tensor"),
    (attribute("axes", [0]), attribute("mode", 1), "attribute 'mode': expected string, found int"),
    (attribute("axes", [0]), attribute("mode", b"zero\0junk"), "unknown mode"),
    (None, None, "attribute 'axes': required but missing"),
])
def test_library_and_interpreter_refuse_the_same_attributes(ort, tmp_path, axes, mode, message):
    attrs = {k: v for k, v in (("axes", axes), ("mode", mode)) if v is not None}
    model = multiaxis_model(**attrs)
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    i = np.array([[0], [3], [1]], dtype=np.int64)
    with pytest.raises(Exception, match=message):
        session(model).run(None, {"x": x, "i": i})
    with pytest.raises(multigather.Error, match=message):
        multigather.run(model, {"x": x, "i": i})


def test_a_rewritten_gather_in_a_scan_body_runs_in_onnxruntime(ort):
    # The body picks row 1 of each [3, 4] slice; onnxruntime requires the body's outputs typed.
    body = helper.make_graph(
        [helper.make_node("Gather", ["s", "row"], ["g"], axis=0)], "body",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(1, dtype=np.int64), "row")])
    scan = helper.make_node("Scan", ["x"], ["y"], num_scan_inputs=1, body=body)
    graph = helper.make_graph(
        [scan], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rewritten = multigather.rewrite(model)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    want = session(model, library=False).run(None, {"x": x})[0]
    got = session(rewritten).run(None, {"x": x})[0]
    np.testing.assert_array_equal(want, got)


def test_the_model_returned_is_the_model_saved(tmp_path):
    expected = multigather.rewrite(gather_model())
    got = multigather.rewrite(gather_model(), output=os.devnull)
    assert got == expected
    saved = multigather.rewrite(gather_model(), output=tmp_path / "out.onnx")
    assert saved == expected == onnx.load(tmp_path / "out.onnx")


def test_the_input_is_not_overwritten_without_in_place(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(gather_model(), path)
    before = path.read_bytes()
    for call in (multigather.rewrite, multigather.lower):
        with pytest.raises(multigather.Error, match="is the input file; pass in_place=True"):
            call(str(path), output=path)
        assert path.read_bytes() == before
    multigather.rewrite(str(path), output=path, in_place=True)
    assert "GatherMultiaxis" in {n.op_type for n in onnx.load(path).graph.node}


TRUNCATING_SCRIPT = r"""
import sys, threading, time
import multigather

model, data, out = sys.argv[1:4]
weights = open(data, "rb").read()
stop = time.monotonic() + 3.0
calls = {"ok": 0, "error": 0}


def truncate_and_restore():
    while time.monotonic() < stop:
        with open(data, "r+b") as f:
            f.truncate(0)
        with open(data, "r+b") as f:
            f.write(weights)


thread = threading.Thread(target=truncate_and_restore)
thread.start()
while time.monotonic() < stop:
    try:
        multigather.rewrite(model, output=out)
        calls["ok"] += 1
    except multigather.Error as e:
        assert "weights.bin" in str(e), e
        calls["error"] += 1
thread.join()
print(calls)
"""


def test_a_file_truncated_under_the_package_is_an_error_not_a_crash(tmp_path):
    # A mapped file truncated by another process kills its reader with SIGBUS; the package
    # reads files, so the interpreter survives and each call succeeds or raises.
    import subprocess
    import sys

    table = np.zeros((1 << 20, 8), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["y"], name="lookup")], "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin")
    out = tmp_path / "out" / "r.onnx"
    out.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATING_SCRIPT, str(path), str(tmp_path / "weights.bin"), str(out)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
