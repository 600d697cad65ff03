"""The VM bytecode compiler on hand-built legalized modules, run by tcc.rt.vm with numpy
kernels (FakeLibrary). The builders here are shared with tests/rt and tests/emit."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.vm import VMCompileError, compile_module
from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var as SizeVar
from tcc.ir.module import IRModule
from tcc.rt.errors import KernelError, RunInputError
from tcc.rt.format import decode
from tcc.rt.pack import verify_executable
from tcc.rt.vm import VirtualMachine

F32 = "float32"


def T(*shape, dtype=F32):
    return G.TensorType(tuple(shape), dtype)


class FakeLibrary:
    """Kernels as numpy functions writing their trailing output arguments in place."""

    KERNELS = {
        "matmul": lambda x, w, out: np.matmul(x, w, out=out),
        "add_one": lambda x, out: np.add(x, 1, out=out),
        "negate": lambda x, out: np.negative(x, out=out),
        "split_1_2": lambda x, a, b: (np.copyto(a, x[:, :1]), np.copyto(b, x[:, 1:])),
        "concat_rows": lambda x, y, out: np.copyto(out, np.concatenate([x, y])),
        "fill_k": lambda out, k: out.fill(k),
    }

    def __init__(self):
        self.calls: list[str] = []
        self.threads = None

    def call(self, symbol, arrays):
        for a in arrays:
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous):
                raise KernelError(f"{symbol}: arguments must be C-contiguous arrays")
        self.calls.append(symbol)
        self.KERNELS[symbol](*arrays)

    def set_num_threads(self, n):
        self.threads = n


class Contents:
    """What VirtualMachine needs from a pack, for running an executable without one."""

    def __init__(self, exe, weights=None):
        self.executable = exe
        self.weights = {k: _readonly(v) for k, v in (weights or {}).items()}
        self.signatures = exe.signatures


def _readonly(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def batch_module() -> IRModule:
    """main(x[n,4]) -> (z[n,3], a[n,1], flat[n*3]) with a weight, a tuple-valued kernel and a
    view; every shape is symbolic in n."""
    mod = IRModule()
    n = SizeVar("n")
    w = mod.add_constant("w", np.arange(12, dtype=np.float32).reshape(4, 3))
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.bind(G.CallTIR("matmul", (x, w), T(n, 3)), T(n, 3), "y")
    z = bb.bind(G.CallTIR("add_one", (y,), T(n, 3)), T(n, 3), "z")
    parts = G.TupleType((T(n, 1), T(n, 2)))
    t = bb.bind(G.CallTIR("split_1_2", (z,), parts), parts, "t")
    a = bb.get_item(t, 0, "a")
    flat = bb.bind(G.Call("reshape", (z,), {"shape": [n * 3]}), T(n * 3), "flat")
    mod.functions["main"] = bb.finish([z, a, flat], ["z", "a", "flat"])
    return mod


def batch_reference(x):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    z = x @ w + 1
    return [z, z[:, :1], z.reshape(-1)]


def if_module() -> IRModule:
    """main(c: bool, x[n,4]) -> add_one(x) if c else negate(x), via two branch functions."""
    mod = IRModule()
    n = SizeVar("n")
    for name, kernel in (("then_f", "add_one"), ("else_f", "negate")):
        m = SizeVar("m")
        bb = FunctionBuilder()
        p = bb.param("x", T(m, 4))
        r = bb.bind(G.CallTIR(kernel, (p,), T(m, 4)), T(m, 4), "r")
        mod.functions[name] = bb.finish([r], ["r"])
    bb = FunctionBuilder()
    c = bb.param("c", T(dtype="bool"))
    x = bb.param("x", T(n, 4))
    e = G.If(c, "then_f", "else_f", (x,))
    r = bb.bind(e, G.infer_control_flow(e, mod.functions), "r")
    mod.functions["main"] = bb.finish([r], ["r"])
    return mod


def two_input_module() -> IRModule:
    """main(x[n,4], y[n*2,4]) -> concat_rows(x, y)[n*3,4]: an input dim that is an expression."""
    mod = IRModule()
    n = SizeVar("n")
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.param("y", T(n * 2, 4))
    r = bb.bind(G.CallTIR("concat_rows", (x, y), T(n * 3, 4)), T(n * 3, 4), "r")
    mod.functions["main"] = bb.finish([r], ["r"])
    return mod


def tiny_module() -> IRModule:
    mod = IRModule()
    n = SizeVar("n")
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.bind(G.CallTIR("add_one", (x,), T(n, 4)), T(n, 4), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    return mod


def machine(mod, weights=None):
    exe = compile_module(mod)
    verify_executable(exe, set(FakeLibrary.KERNELS), set(mod.const_values), exe.signatures)
    lib = FakeLibrary()
    return VirtualMachine(Contents(exe, mod.const_values if weights is None else weights), lib), lib


# -- running --------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 3])
def test_one_executable_serves_every_batch(batch):
    vm, lib = machine(batch_module())
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    got = vm.run("main", [x])
    for g, want in zip(got, batch_reference(x), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-6)
    assert lib.calls == ["matmul", "add_one", "split_1_2"]


def test_outputs_are_writable_arrays_that_export_dlpack():
    vm, _ = machine(batch_module())
    outs = vm.run("main", [np.ones((2, 4), np.float32)])
    for o in outs:
        assert isinstance(o, np.ndarray) and o.flags.writeable
        np.testing.assert_array_equal(np.from_dlpack(o), o)


def test_if_runs_the_branch_the_condition_picks():
    vm, lib = machine(if_module())
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(vm.run("main", [np.array(True), x])[0], x + 1)
    np.testing.assert_array_equal(vm.run("main", [np.array(False), x])[0], -x)
    assert lib.calls == ["add_one", "negate"]


def test_expression_dimension_of_an_input_is_checked():
    vm, _ = machine(two_input_module())
    x, y = np.ones((2, 4), np.float32), np.zeros((4, 4), np.float32)
    assert vm.run("main", [x, y])[0].shape == (6, 4)
    with pytest.raises(RunInputError, match=r"input 'y' of 'main': dimension 0 must be 4 .*got 3"):
        vm.run("main", [x, np.zeros((3, 4), np.float32)])


def test_named_inputs_and_dlpack_inputs():
    vm, _ = machine(two_input_module())
    x, y = np.ones((1, 4), np.float32), np.zeros((2, 4), np.float32)
    a = vm.run("main", [], {"y": y, "x": x})[0]
    b = vm.run("main", [memoryview_free_dlpack(x), y])[0]
    np.testing.assert_array_equal(a, b)


class memoryview_free_dlpack:  # noqa: N801  (a stand-in for a torch/jax tensor)
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


# -- input errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ([np.ones((2, 4), np.float64)], r"input 'x' of 'main': expected dtype float32, got float64"),
        ([np.ones((2, 4, 1), np.float32)], r"input 'x' of 'main': expected rank 2, got rank 3"),
        ([np.ones((2, 5), np.float32)], r"input 'x' of 'main': dimension 1 must be 4, got 5"),
        ([], r"'main' takes 1 inputs \(x\), got 0"),
        (["text"], r"input 'x' of 'main': a str is neither"),
    ],
)
def test_wrong_inputs_name_the_input(args, message):
    vm, _ = machine(batch_module())
    with pytest.raises(RunInputError, match=message):
        vm.run("main", args)


def test_wrong_input_names():
    vm, _ = machine(two_input_module())
    x = np.ones((1, 4), np.float32)
    with pytest.raises(RunInputError, match=r"'main' has no input named 'z'; its inputs are \['x', 'y'\]"):
        vm.run("main", [], {"x": x, "z": x})
    with pytest.raises(RunInputError, match=r"input 'y' is missing"):
        vm.run("main", [], {"x": x})


def test_size_variable_must_agree_between_inputs():
    mod = IRModule()
    n = SizeVar("n")
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.param("y", T(n, 4))
    r = bb.bind(G.CallTIR("concat_rows", (x, y), T(n * 2, 4)), T(n * 2, 4), "r")
    mod.functions["main"] = bb.finish([r], ["r"])
    vm, _ = machine(mod)
    with pytest.raises(RunInputError, match=r"input 'y' of 'main': dimension 0 is n = 2 .*got 3"):
        vm.run("main", [np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)])


# -- compiling ------------------------------------------------------------------------------


def test_disassembly_of_a_tiny_function():
    assert compile_module(tiny_module()).as_text() == """\
; function table
  f0 = builtin match_shape
  f1 = builtin make_shape
  f2 = builtin alloc_tensor
  f3 = kernel add_one
; constants
  c0 = "input 'x' of 'main'"
  c1 = 'float32'
  c2 = [2, 1, 0, 0, 4]
  c3 = [2, 2, 1, 0, 2, 0, 4]
function main(params=1, regs=3, heap=[0:n])
    0: call match_shape(%0, c0, c1, c2)
    1: %1 = call make_shape(c3)
    2: %2 = call alloc_tensor(%1, c1)
    3: call add_one(%0, %2)
    4: ret %2
"""


def test_compiling_is_deterministic_and_round_trips():
    a, b = compile_module(batch_module()), compile_module(batch_module())
    assert a.encode() == b.encode()
    back = decode(a.encode())
    assert back.as_text() == a.as_text()


def test_signature_names_size_variables():
    sig = compile_module(two_input_module()).signatures["main"]
    assert sig == {
        "inputs": [{"name": "x", "dtype": F32, "shape": ["n", 4]},
                   {"name": "y", "dtype": F32, "shape": ["n * 2", 4]}],
        "outputs": [{"name": "r", "dtype": F32, "shape": ["n * 3", 4]}],
    }


def test_branch_functions_are_not_entries():
    exe = compile_module(if_module())
    assert list(exe.signatures) == ["main"]
    assert [f.name for f in exe.functions] == ["then_f", "else_f", "main"]


def test_unlegalized_op_is_refused():
    mod = IRModule()
    bb = FunctionBuilder()
    x = bb.param("x", T(2))
    y = bb.bind(G.Call("relu", (x,), {}), T(2), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    with pytest.raises(VMCompileError, match="ops without a loop program .*relu; legalize"):
        compile_module(mod)


def test_loop_with_a_missing_body_is_refused():
    mod = IRModule()
    bb = FunctionBuilder()
    x = bb.param("x", T(2))
    loop = G.Loop("body", None, None, (x,), ())
    y = bb.bind(loop, T(2), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    with pytest.raises(VMCompileError, match="the loop body 'body' is not a graph function"):
        compile_module(mod)


def test_data_dependent_output_shape_is_refused():
    mod = IRModule()
    k = SizeVar("k")
    bb = FunctionBuilder()
    x = bb.param("x", T(2))
    y = bb.bind(G.CallTIR("nonzero", (x,), T(k)), T(k), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    with pytest.raises(VMCompileError, match="size variable 'k', which no input binds"):
        compile_module(mod)


def test_shape_args_are_passed_as_scalars():
    mod = IRModule()
    n = SizeVar("n")
    bb = FunctionBuilder()
    x = bb.param("x", T(n))
    y = bb.bind(G.CallTIR("fill_k", (), T(n), shape_args=(n * 2,)), T(n), "y")
    mod.functions["main"] = bb.finish([y], ["y"])
    del x
    vm, _ = machine(mod)
    np.testing.assert_array_equal(vm.run("main", [np.zeros(3, np.float32)])[0], [6, 6, 6])
