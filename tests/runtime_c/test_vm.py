"""The C runtime's VM (runtime_c/src/vm.c) against the Python one (tcc.rt): the same pack,
the same inputs, bitwise the same outputs; the same one-line messages for wrong inputs.
Runs in-process through the library (tests/runtime_c/capi.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import tcc
import tcc.rt
from tcc.rt.errors import RunInputError
from tests.emit.test_vm_loops import onnx_loop_model
from tests.runtime_c.capi import CRuntime, CRuntimeError, build_runtime

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make"
)


@pytest.fixture(scope="module")
def crt(tmp_path_factory) -> CRuntime:
    return CRuntime(build_runtime(tmp_path_factory.mktemp("tccrt-vm")) / "libtccrt.so")


def vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def if_model():
    """y = x * 2 when sum(x) > 0 else x - 1, over a symbolic batch."""
    then = h.make_graph([h.make_node("Add", ["x", "x"], ["t"])], "then", [],
                        [vi("t", TP.FLOAT, ["n", 3])])
    other = h.make_graph([h.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                         [vi("e", TP.FLOAT, ["n", 3])])
    return model(
        [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         h.make_node("Greater", ["s", "zero"], ["c"]),
         h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [vi("x", TP.FLOAT, ["n", 3])], [vi("y", TP.FLOAT, ["n", 3])],
        [h.make_tensor("zero", TP.FLOAT, [], [0.0]), h.make_tensor("one", TP.FLOAT, [], [1.0])],
    )


def scan_model():
    """A running sum over the rows of x (Scan, opset 9+), with the partial sums stacked."""
    body = h.make_graph(
        [h.make_node("Add", ["s_in", "row"], ["s_out"]),
         h.make_node("Identity", ["s_out"], ["scan_out"])],
        "body", [vi("s_in", TP.FLOAT, [4]), vi("row", TP.FLOAT, [4])],
        [vi("s_out", TP.FLOAT, [4]), vi("scan_out", TP.FLOAT, [4])])
    return model(
        [h.make_node("Scan", ["s0", "x"], ["s", "partial"], body=body, num_scan_inputs=1,
                     scan_input_directions=[1])],
        [vi("s0", TP.FLOAT, [4]), vi("x", TP.FLOAT, ["t", 4])],
        [vi("s", TP.FLOAT, [4]), vi("partial", TP.FLOAT, ["t", 4])])


def mlp_model():
    rng = np.random.default_rng(0)
    w = h.make_tensor("w", TP.FLOAT, [4, 5], rng.standard_normal(20).astype(np.float32))
    return model(
        [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
         h.make_node("Reshape", ["r", "shape"], ["y"]), h.make_node("Identity", ["w"], ["wc"])],
        [vi("x", TP.FLOAT, ["b", 4])], [vi("y", TP.FLOAT, ["b", 5, 1]), vi("wc", TP.FLOAT, [4, 5])],
        [w, h.make_tensor("shape", TP.INT64, [3], [-1, 5, 1])])


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("vm-packs")
    for name, m in [("if", if_model()), ("loop", onnx_loop_model()), ("scan", scan_model()),
                    ("mlp", mlp_model())]:
        out[name] = d / f"{name}.tvmpack"
        tcc.compile(m, output=out[name])
    return out


def assert_same(c_outs, py_outs):
    assert len(c_outs) == len(py_outs)
    for c, p in zip(c_outs, py_outs):
        assert c.dtype == p.dtype and c.shape == p.shape
        assert c.tobytes() == p.tobytes()


def both(crt, path, inputs):
    py = tcc.rt.load(path)["main"](*inputs)
    c = crt.load(path).run("main", inputs)
    assert_same(c, py)
    return c


RNG = np.random.default_rng(1)


@pytest.mark.parametrize("rows, sign", [(1, 1.0), (3, -1.0), (0, 1.0)])
def test_if_branches(crt, packs, rows, sign):
    x = (sign * np.abs(RNG.standard_normal((rows, 3)))).astype(np.float32)
    both(crt, packs["if"], [x])


@pytest.mark.parametrize("trips, cond", [(2, True), (9, True), (0, True), (3, False)])
def test_loop_with_carried_growing_and_scan_outputs(crt, packs, trips, cond):
    inputs = [np.array(trips, np.int64), np.array(cond), RNG.standard_normal(3).astype(np.float32),
              RNG.standard_normal((1, 3)).astype(np.float32),
              RNG.standard_normal((6, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)]
    both(crt, packs["loop"], inputs)


@pytest.mark.parametrize("t", [0, 1, 5])
def test_scan_in_reverse(crt, packs, t):
    outs = both(crt, packs["scan"], [np.zeros(4, np.float32), RNG.standard_normal((t, 4)).astype(np.float32)])
    assert outs[1].shape == (t, 4)


def test_views_and_weight_outputs_are_owned_copies(crt, packs):
    outs = both(crt, packs["mlp"], [RNG.standard_normal((3, 4)).astype(np.float32)])
    assert outs[0].shape == (3, 5, 1) and outs[1].shape == (4, 5)


@pytest.mark.parametrize("bad", [
    np.zeros((2, 4), np.float64),  # dtype
    np.zeros((2, 4, 1), np.float32),  # rank
    np.zeros((2, 3), np.float32),  # a static dimension
])
def test_wrong_inputs_give_the_python_runtimes_message(crt, packs, bad):
    with pytest.raises(RunInputError) as py:
        tcc.rt.load(packs["mlp"])["main"](bad)
    with pytest.raises(CRuntimeError) as c:
        crt.load(packs["mlp"]).run("main", [bad])
    assert c.value.status == "invalid input"
    assert c.value.message == str(py.value)


def test_wrong_input_count_and_unknown_function(crt, packs):
    m = crt.load(packs["mlp"])
    with pytest.raises(CRuntimeError, match=r"'main' takes 1 inputs \(x\), got 2"):
        m.run("main", [np.zeros((1, 4), np.float32)] * 2, 2)
    with pytest.raises(CRuntimeError, match="no entry function 'nope'"):
        m.run("nope", [], 1)


def test_symbolic_dims_checked_across_inputs(crt, tmp_path):
    """Two inputs sharing a size variable: the second must agree with the first."""
    path = tmp_path / "add.tvmpack"
    tcc.compile(model([h.make_node("Add", ["a", "b"], ["y"])],
                      [vi("a", TP.FLOAT, ["n", 2]), vi("b", TP.FLOAT, ["n", 2])],
                      [vi("y", TP.FLOAT, ["n", 2])]), output=path)
    a, b = np.ones((3, 2), np.float32), np.ones((4, 2), np.float32)
    with pytest.raises(RunInputError) as py:
        tcc.rt.load(path)["main"](a, b)
    with pytest.raises(CRuntimeError) as c:
        crt.load(path).run("main", [a, b])
    assert c.value.message == str(py.value)
    both(crt, path, [a, a])


def test_thread_count(crt, packs, monkeypatch):
    m = crt.load(packs["mlp"])
    m.set_num_threads(1)
    x = RNG.standard_normal((64, 4)).astype(np.float32)
    one = m.run("main", [x])
    m.set_num_threads(2)
    assert_same(m.run("main", [x]), one)
    with pytest.raises(CRuntimeError, match="0 \\(the default\\) or positive"):
        m.set_num_threads(-1)
    monkeypatch.setenv("TCC_NUM_THREADS", "many")
    with pytest.raises(CRuntimeError, match="TCC_NUM_THREADS must be a positive integer"):
        crt.load(packs["mlp"])
