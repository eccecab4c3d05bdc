"""One proof, two faces: ``multigather.verify`` and the ``multigather verify`` command line call
the same library function (``verify::prove``), so on every fixture they give the same verdict,
the same draws and dimension sizes, the same comparisons, and on a model the proof refuses the
same message. (``tests/cli.rs`` checks the command line against the library in Rust.)"""

import dataclasses
import glob
import json
import os
import shutil
import subprocess

import onnx
import pytest
from onnx import TensorProto, helper

import multigather
from conftest import REPO


def cli(*args):
    exe = shutil.which("multigather")
    assert exe, "the console script is not on PATH"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)


FIXTURES = sorted(glob.glob(os.path.join(REPO, "fixtures", "*", "model.onnx")))


@pytest.mark.parametrize("model", FIXTURES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_verify_and_the_command_line_give_the_same_proof(model):
    done = cli("verify", model, "--json")
    try:
        report = multigather.verify(model, random=True)
    except multigather.Error as e:
        assert done.returncode == 2, done.stderr
        assert done.stderr.rstrip("\n") == f"error: {e}"
        return
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout) == dataclasses.asdict(report)
    assert report.identical == (done.returncode == 0)


def test_verify_and_the_command_line_refuse_alike(tmp_path):
    # A gather, then an operator the interpreter lacks: the rewrite is made, not proved.
    f = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g"),
         helper.make_node("NoSuchOp", ["y"], ["z"], domain="example.custom")],
        "main", [f("x", [3, 2])], [f("z", [2, 2])],
        [helper.make_tensor("i", TensorProto.INT64, [2], [2, 0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("example.custom", 3)])
    path = tmp_path / "unknown.onnx"
    onnx.save(model, path)
    with pytest.raises(multigather.Error) as e:
        multigather.verify(path)
    assert str(e.value).startswith("cannot prove the rewrite by running it (1 gathers rewritten")
    done = cli("verify", path)
    assert done.returncode == 2
    assert done.stderr.rstrip("\n") == f"error: {e.value}"


def test_verify_draws_what_the_command_line_draws_with_seed_and_dims():
    model = os.path.join(REPO, "fixtures", "gather_symbolic_dims", "model.onnx")
    done = cli("verify", model, "--json", "--seed", "3", "--dim", "batch=2", "--dim", "sequence=7")
    assert done.returncode == 0, done.stderr
    report = multigather.verify(model, random=True, seed=3, dims={"batch": 2, "sequence": 7})
    assert json.loads(done.stdout) == dataclasses.asdict(report)
    dims = {d.name: (d.size, d.source) for d in report.dims}
    assert dims["batch"] == (2, "--dim") and dims["sequence"] == (7, "--dim")
