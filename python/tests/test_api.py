"""The Python API: rewrite, lower, run, verify, errors, the console script, the library path;
and every fixture, rewritten, run in onnxruntime with the library, bit for bit against
onnxruntime on the original."""

import glob
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import multigather
from conftest import REPO, ort_bytes, ort_value, session


def gather_model(op="Gather", **attrs):
    node = helper.make_node(op, ["x", "i"], ["y"], name="select", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_rewrite_accepts_a_model_bytes_and_a_path(tmp_path):
    model = gather_model(axis=1)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for given in (model, model.SerializeToString(), str(path), path):
        out = multigather.rewrite(given)
        assert isinstance(out, onnx.ModelProto)
        assert "GatherMultiaxis" in {n.op_type for n in out.graph.node}


def test_rewrite_options(tmp_path):
    model = gather_model(axis=1)
    untouched = multigather.rewrite(model, ops=["GatherND"])
    assert [n.op_type for n in untouched.graph.node] == ["Gather"]
    skipped = multigather.rewrite(model, skip=["select"])
    assert [n.op_type for n in skipped.graph.node] == ["Gather"]
    with_body = multigather.rewrite(model, with_function_body=True)
    assert len(with_body.functions) == 1
    saved = multigather.rewrite(model, output=tmp_path / "out.onnx")
    assert onnx.load(tmp_path / "out.onnx") == saved
    with pytest.raises(multigather.Error, match="unknown op kind 'Take'"):
        multigather.rewrite(model, ops=["Take"])


def test_lower_then_run_and_verify():
    model = gather_model("GatherElements", axis=0)
    model.graph.input[1].CopyFrom(helper.make_tensor_value_info("i", TensorProto.INT64, [2, 5]))
    rewritten = multigather.rewrite(model)
    lowered = multigather.lower(rewritten)
    assert "GatherMultiaxis" not in {n.op_type for n in lowered.graph.node}
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    i = np.array([[3, 0, 1, -1, 2], [0, 0, 0, 0, 0]])
    want = np.take_along_axis(x, i % 4, 0)
    for m in (model, rewritten, lowered):
        np.testing.assert_array_equal(multigather.run(m, {"x": x, "i": i})["y"], want)
    report = multigather.verify(model, rewritten, inputs={"x": x, "i": i})
    assert report.identical and report and report.outputs[0].mismatches == 0
    assert multigather.verify(model, random=True, seed=3).rewritten_nodes == 1


def test_errors_are_multigather_errors_with_one_line():
    with pytest.raises(multigather.Error) as e:
        multigather.rewrite(b"not a model")
    assert str(e.value).startswith("not a valid ONNX model")
    model = gather_model(axis=1)
    with pytest.raises(multigather.Error) as e:
        multigather.run(model, {"x": np.zeros((4, 5), np.float32), "i": np.array([0, 7, 1])})
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("node 'select' (Gather)")
    with pytest.raises(multigather.Error, match="missing.onnx"):
        multigather.lower("missing.onnx")
    assert issubclass(multigather.Error, Exception)


def test_console_script(tmp_path):
    exe = shutil.which("multigather")
    assert exe, "the console script is not on PATH"
    onnx.save(gather_model(axis=1), tmp_path / "m.onnx")
    done = subprocess.run([exe, "rewrite", tmp_path / "m.onnx", "-o", tmp_path / "r.onnx"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.onnx").is_file()
    bad = subprocess.run([exe, "inspect", tmp_path / "missing.onnx"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_console_script_ends_quietly_on_a_closed_pipe():
    # As the binary: a reader that went away (`multigather inspect m.onnx | head`) has all it
    # wanted, so the command ends with 0 and prints no error.
    exe = shutil.which("multigather")
    assert exe, "the console script is not on PATH"
    model = os.path.join(REPO, "fixtures", "gather_chain", "model.onnx")
    child = subprocess.Popen([exe, "inspect", model], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait() == 0, err
    assert b"error" not in err


def test_library_path_is_loadable(ort):
    path = multigather.get_library_path()
    assert os.path.isfile(path)
    session(multigather.rewrite(gather_model(axis=1)))


FIXTURES = sorted(glob.glob(os.path.join(REPO, "fixtures", "*", "model.onnx")))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: os.path.basename(os.path.dirname(p)))
@pytest.mark.parametrize("threads", [1, 2])
def test_fixture_rewritten_runs_in_onnxruntime_bit_for_bit(ort, path, threads):
    data = os.path.join(os.path.dirname(path), "test_data_set_0")
    model = onnx.load(path)
    inputs = {}
    for k, declared in enumerate(model.graph.input):
        file = os.path.join(data, f"input_{k}.pb")
        if os.path.exists(file):
            inputs[declared.name] = onnx.load_tensor(file)
    try:
        original = session(model, threads, library=False)
    except Exception as e:  # a fixture onnxruntime itself does not load
        pytest.skip(f"onnxruntime does not load the original: {str(e)[:120]}")
    rewritten = multigather.rewrite(path)
    feeds = {name: ort_value(t) for name, t in inputs.items()}
    want = original.run_with_ort_values(None, feeds)
    got = session(rewritten, threads).run_with_ort_values(None, feeds)
    for w, g in zip(want, got):
        assert w.shape() == g.shape()
        if w.data_type() == "tensor(string)":
            assert list(w.numpy().flat) == list(g.numpy().flat)
        else:
            code = onnx.helper.np_dtype_to_tensor_dtype(w.numpy().dtype) if "float8" not in w.data_type() else None
            if code is None:
                continue
            assert ort_bytes(w, code) == ort_bytes(g, code)


def test_run_takes_and_returns_sequences_and_optionals_as_onnxruntime_does():
    """Sequences come back as lists of arrays and optionals as the held value (or None), as
    onnxruntime returns them; sequence inputs are lists, an empty optional is None."""
    import onnxruntime as ort

    seq = helper.make_tensor_sequence_value_info
    insert = helper.make_node("SequenceInsert", ["s", "x"], ["longer"])
    split = helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0)
    length = helper.make_node("SequenceLength", ["longer"], ["n"])
    graph = helper.make_graph(
        [insert, split, length], "g",
        [seq("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [seq("longer", TensorProto.FLOAT, None), seq("rows", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = [np.ones(4, np.float32)]
    got = multigather.run(model, {"s": s, "x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"s": s, "x": x})
    for name, theirs in zip(("longer", "rows"), want[:2]):
        assert isinstance(got[name], list) and len(got[name]) == len(theirs)
        for mine, t in zip(got[name], theirs):
            np.testing.assert_array_equal(mine, t)
    assert int(got["n"]) == int(want[2]) == 2

    has = helper.make_node("OptionalHasElement", ["o"], ["has"])
    same = helper.make_node("Identity", ["o"], ["same"])
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        [has, same], "g", [helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
         helper.make_value_info("same", opt)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    got = multigather.run(model, {"o": np.array([1.0, 2.0], np.float32)})
    assert bool(got["has"]) and list(got["same"]) == [1.0, 2.0]
    got = multigather.run(model, {"o": None})
    assert not bool(got["has"]) and got["same"] is None


def test_run_returns_zipmap_output_as_onnxruntimes_list_of_dicts():
    """ZipMap's sequence of maps comes back as onnxruntime returns it: a list of dicts, string
    keys as str and int keys as int, values as float; the committed fixtures hold both."""
    import onnxruntime as ort

    for case in ("strings", "int64"):
        path = os.path.join(REPO, "fixtures", "zipmap", case, "model.onnx")
        x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
        got = multigather.run(path, {"x": x})
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(got["label"], want[0])
        maps = got["probabilities"]
        assert isinstance(maps, list) and len(maps) == len(want[1]) == 3
        for mine, theirs in zip(maps, want[1]):
            assert list(mine) == list(theirs)
            assert all(type(k) is type(t) for k, t in zip(mine, theirs))
            assert all(isinstance(v, float) for v in mine.values())
            np.testing.assert_allclose(list(mine.values()), list(theirs.values()), rtol=1e-5)
        report = multigather.verify(path, inputs={"x": x})
        assert report.identical
        assert report.outputs[1].dtype.startswith("seq(map(")
