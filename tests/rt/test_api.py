"""The public loader API: tcc.rt.load -> Module."""

from __future__ import annotations

import numpy as np
import pytest

import tcc.rt
from tcc.emit.pack import write_pack
from tcc.emit.vm import compile_module
from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var as SizeVar
from tcc.ir.module import IRModule
from tcc.rt.errors import PackError, RunInputError
from tests.emit.test_pack_write import FakeCpuModule
from tests.emit.test_vm_compile import FakeLibrary, T, batch_module, batch_reference, if_module


@pytest.fixture
def batch_pack(tmp_path):
    mod = batch_module()
    path = tmp_path / "batch.tvmpack"
    write_pack(path, compile_module(mod), FakeCpuModule(["matmul", "add_one", "split_1_2"]),
               "llvm", mod.const_values)
    return path


def test_call_by_index_attribute_and_name(batch_pack):
    with tcc.rt.load(batch_pack, kernel_library=FakeLibrary()) as m:
        assert m.entry_functions == ["main"] and m.target == "llvm"
        for batch in (1, 3):
            x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
            want = batch_reference(x)
            for got in (m["main"](x), m.main(x), m["main"]({"x": x}), m.main(x=x)):
                assert isinstance(got, list) and len(got) == 3
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-6)


def test_signature_is_symbolic(batch_pack):
    with tcc.rt.load(batch_pack, kernel_library=FakeLibrary()) as m:
        sig = m.signature("main")
        assert sig["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["n", 4]}]
        assert [o["shape"] for o in sig["outputs"]] == [["n", 3], ["n", 1], ["n * 3"]]
        sig["inputs"].clear()  # a copy: the module's stays intact
        assert m.signature()["inputs"]
        with pytest.raises(RunInputError, match="no entry function 'other'"):
            m.signature("other")


def test_wrong_inputs_through_the_api(batch_pack):
    with tcc.rt.load(batch_pack, kernel_library=FakeLibrary()) as m:
        with pytest.raises(RunInputError, match="input 'x' of 'main': expected dtype float32, got int32"):
            m.main(np.ones((2, 4), np.int32))
        with pytest.raises(RunInputError, match="'main' has no input named 'input'"):
            m.main({"input": np.ones((2, 4), np.float32)})
        with pytest.raises(RunInputError, match="dimension 1 must be 4, got 2"):
            m.main(np.ones((2, 2), np.float32))


def test_threads_close_and_unknown_names(batch_pack):
    lib = FakeLibrary()
    m = tcc.rt.load(batch_pack, kernel_library=lib)
    m.set_num_threads(3)
    assert lib.threads == 3
    with pytest.raises(tcc.rt.RunInputError, match="at least 1"):
        m.set_num_threads(0)
    with pytest.raises(KeyError, match="no entry function 'nope'"):
        m["nope"]
    with pytest.raises(AttributeError):
        m.nope
    f = m.main
    m.close()
    with pytest.raises(PackError, match="the module is closed"):
        f(np.ones((1, 4), np.float32))


def test_kernels_without_a_shared_object(tmp_path):
    path = tmp_path / "noso.tvmpack"
    write_pack(path, compile_module(if_module()),
               FakeCpuModule(["add_one", "negate"], shared=False), "llvm", {})
    with pytest.raises(PackError, match="no shared object for target 'llvm'"):
        tcc.rt.load(path)


def test_a_pack_without_kernels_needs_no_library(tmp_path):
    mod = IRModule()
    n = SizeVar("n")
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 2))
    y = bb.bind(G.Call("reshape", (x, None), {}), T(n * 2), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    path = tmp_path / "view.tvmpack"
    write_pack(path, compile_module(mod), None, "llvm", {})
    with tcc.rt.load(path) as m:
        (y,) = m.main(np.arange(6, dtype=np.float32).reshape(3, 2))
        np.testing.assert_array_equal(y, np.arange(6))


def test_real_kernels_end_to_end(tmp_path):
    """te -> LLVM -> pack -> tcc.rt.load with the pack's own shared object, batch 1 and 3."""
    te = pytest.importorskip("tcc.ir.te")
    llvm = pytest.importorskip("tcc.emit.llvm")
    pytest.importorskip("tcc.rt.kernels")
    n = SizeVar("n")
    a = te.placeholder((n, 4), "float32", "A")
    b = te.compute((n, 4), lambda i, j: a[i, j] + te.const(1.0, "float32"), "B")
    mod = IRModule()
    mod.functions["add_one"] = te.create_prim_func([a, b])
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.bind(G.CallTIR("add_one", (x,), T(n, 4)), T(n, 4), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    cpu = llvm.compile_prim_funcs(mod.prim_funcs, "llvm")
    if cpu.shared_object is None:
        pytest.skip("no linker: the pack has no shared object")
    path = tmp_path / "real.tvmpack"
    write_pack(path, compile_module(mod), cpu, "llvm", {})
    with tcc.rt.load(path) as m:
        m.set_num_threads(1)
        for batch in (1, 3):
            x = np.random.default_rng(batch).random((batch, 4), dtype=np.float32)
            np.testing.assert_array_equal(m.main(x)[0], x + 1)
        with pytest.raises(RunInputError, match="dimension 1 must be 4, got 5"):
            m.main(np.ones((2, 5), np.float32))
