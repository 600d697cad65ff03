"""A kernel whose accesses are in bounds only when its arguments' shapes agree (a concat of
inputs whose shapes name the same dimension with different variables) checks that once per
call: both runtimes refuse shapes that would make it read outside a buffer, with one line
naming the sizes, and run the ones that fit."""

import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import tcc.rt
from tcc.cli.main import cli
from tcc.rt.errors import KernelError
from tests.packs import compiled_pack

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None


def _concat_model():
    # ONNX requires x's and y's row counts to be equal; the names leave that unsaid
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "y"], ["z"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def pack():
    return compiled_pack(_concat_model())


def test_shapes_that_fit_run(pack):
    x, y = np.ones((5, 3), np.float32), np.full((5, 4), 2.0, np.float32)
    with tcc.rt.load(pack) as m:
        (z,) = m["main"](x, y)
    np.testing.assert_array_equal(z, np.concatenate([x, y], axis=1))


def test_shapes_that_would_read_past_a_buffer_are_refused(pack):
    x, y = np.ones((50000, 3), np.float32), np.ones((2, 4), np.float32)
    with pytest.raises(KernelError, match=r"concat_kernel: the shapes of its arguments do not fit together: "
                                          r"it needs a <= b, and a = 50000, b = 2"):
        with tcc.rt.load(pack) as m:
            m["main"](x, y)


@pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")
def test_the_c_runtime_refuses_them_with_the_same_line(pack, tmp_path):
    from tests.runtime_c.capi import build_runtime

    tccrt = build_runtime(tmp_path / "build") / "tccrt"
    np.save(tmp_path / "x.npy", np.ones((50000, 3), np.float32))
    np.save(tmp_path / "y.npy", np.ones((2, 4), np.float32))
    r = CliRunner().invoke(cli, ["run", str(pack), "--runtime", "c", "--input", f"x={tmp_path / 'x.npy'}",
                                 "--input", f"y={tmp_path / 'y.npy'}"], env={"TCCRT": str(tccrt)})
    assert r.exit_code == 2, r.output
    assert "it needs a <= b, and a = 50000, b = 2" in r.output
    assert len(r.output.strip().splitlines()) == 1
