"""Loops in the bytecode: the verifier's rule for backward jumps, the loop builtins, and
their errors, on hand-written executables read back from real packs."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.vm import compile_module
from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var as SizeVar
from tcc.ir.module import IRModule
from tcc.rt.errors import PackError, RunInputError
from tcc.rt.format import NO_REG, ArgKind, FuncKind, Instr, Op, VMFunction
from tcc.rt.vm import VirtualMachine
from tests.emit.test_vm_compile import Contents, FakeLibrary, T
from tests.rt.test_vm import exe_of, load

R, IMM, C = ArgKind.REG, ArgKind.IMM, ArgKind.CONST
SIG = {"main": {"inputs": [{"name": "x", "dtype": "float32", "shape": [2]}],
                "outputs": [{"name": "y", "dtype": "float32", "shape": ["trips", 2]}]}}
TABLE = [(FuncKind.BUILTIN, name) for name in (
    "scalar", "loop_continue", "scalar_add", "stack_new", "stack_push", "stack_finish",
    "make_shape", "copy")]
F = {name: i for i, (_, name) in enumerate(TABLE)}
CONSTS = ["int64", "bool", (2, 2, 0, 0, 2, 0, 2), "float32"]  # c2: the shape (0, 2)


def stacking_loop(trips: int, back: int = -6, head_exit: int = 7) -> VMFunction:
    """main(x) = x stacked `trips` times, by a counting loop:
    `i = 0; ok = i < trips; head: if ok else exit; push x; i += 1; ok = ...; goto head`."""
    code = [
        Instr(Op.CALL, F["scalar"], 1, ((IMM, 0), (C, 0))),  # %1 = i
        Instr(Op.CALL, F["scalar"], 2, ((IMM, trips), (C, 0))),  # %2 = limit
        Instr(Op.CALL, F["scalar"], 3, ((IMM, 1), (C, 1))),  # %3 = true
        Instr(Op.CALL, F["stack_new"], 4, ()),  # %4 = acc
        Instr(Op.CALL, F["make_shape"], 6, ((C, 2),)),  # %6 = the empty result's shape
        Instr(Op.CALL, F["loop_continue"], 5, ((R, 1), (R, 2), (R, 3))),
        Instr(Op.IF, 5, head_exit),  # 6: the loop head
        Instr(Op.CALL, F["stack_push"], NO_REG, ((R, 4), (R, 0))),
        Instr(Op.CALL, F["scalar_add"], 1, ((R, 1), (IMM, 1))),
        Instr(Op.CALL, F["loop_continue"], 5, ((R, 1), (R, 2), (R, 3))),
        Instr(Op.CALL, F["copy"], 7, ((R, 0),)),  # 10: filler, so offsets are not trivial
        Instr(Op.CALL, F["copy"], 7, ((R, 0),)),
        Instr(Op.GOTO, back),  # 12: back to the head
        Instr(Op.CALL, F["stack_finish"], 8, ((R, 4), (IMM, 0), (IMM, 0), (R, 6), (C, 3))),
        Instr(Op.RET, 8),
    ]
    return VMFunction("main", 1, 9, (), code)


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_a_hand_written_loop_runs_from_a_pack(tmp_path, trips):
    exe = exe_of(stacking_loop(trips), table=TABLE, constants=CONSTS, signatures=SIG)
    with load(tmp_path, exe) as pc:
        assert pc.executable.as_text() == exe.as_text()
        x = np.array([1.0, 2.0], np.float32)
        (y,) = VirtualMachine(pc, FakeLibrary()).run("main", [x])
    np.testing.assert_array_equal(y, np.stack([x] * trips) if trips else np.zeros((0, 2)))
    assert y.dtype == np.float32


@pytest.mark.parametrize(
    "back, head_exit, message",
    [
        (-5, 7, r"at 12: jump offset -5 goes back to 7, which is not a loop head"),
        (-6, 6, r"at 12: jump offset -6 goes back to 6, which is not a loop head"),
        (-13, 7, r"at 12: jump offset -13 leaves the function or goes back"),
        (-6, -2, r"at 6: jump offset -2 leaves the function or goes back"),
    ],
)
def test_verifier_accepts_backward_jumps_only_onto_loop_heads(tmp_path, back, head_exit, message):
    """A backward goto must land on an `if` whose false target is right after the goto: then
    every cycle passes a test that may leave it. An `if` never jumps back."""
    exe = exe_of(stacking_loop(2, back, head_exit), table=TABLE, constants=CONSTS, signatures=SIG)
    with pytest.raises(PackError, match=message):
        load(tmp_path, exe)


def test_a_loop_that_never_tests_is_rejected(tmp_path):
    code = [Instr(Op.GOTO, 0), Instr(Op.RET, 0)]  # `goto self`
    with pytest.raises(PackError, match="jump offset 0"):
        load(tmp_path, exe_of(VMFunction("main", 1, 1, (), code), signatures=SIG))
    code = [Instr(Op.CALL, 0, 1, ((R, 0),)), Instr(Op.GOTO, -1), Instr(Op.RET, 0)]
    with pytest.raises(PackError, match="goes back to 0, which is not a loop head"):
        load(tmp_path, exe_of(VMFunction("main", 1, 2, (), code), table=[(FuncKind.BUILTIN, "copy")],
                              signatures=SIG))


@pytest.mark.parametrize(
    "name, args, consts, message",
    [
        ("scalar", ((IMM, 1), (C, 0)), ["float32"], "scalar makes bool or integer tensors"),
        ("scalar", ((IMM, 1), (C, 0)), ["int3"], "unknown dtype"),
        ("scalar", ((R, 0), (C, 0)), ["int64"], "wrong kind"),
        ("stack_new", ((R, 0),), [], "stack_new takes 0 arguments, got 1"),
        ("stack_finish", ((R, 0), (IMM, 0), (IMM, 0), (R, 0), (C, 0)), ["float13"], "unknown dtype"),
        ("take", ((R, 0), (R, 0), (IMM, 0)), [], "take takes 4 arguments, got 3"),
        ("loop_continue", ((R, 0), (R, 0), (C, 0)), ["x"], "wrong kind"),
    ],
)
def test_verifier_checks_loop_builtins(tmp_path, name, args, consts, message):
    code = [Instr(Op.CALL, 0, 0, args), Instr(Op.RET, 0)]
    exe = exe_of(VMFunction("main", 1, 1, (), code), table=[(FuncKind.BUILTIN, name)],
                 constants=consts, signatures=SIG)
    with pytest.raises(PackError, match=message):
        load(tmp_path, exe)


def run_one(name, consts, *args):
    """Run main(x) = builtin(args) on a verified-looking executable without a pack."""
    code = [Instr(Op.CALL, 0, 1, args), Instr(Op.RET, 1)]
    exe = exe_of(VMFunction("main", 1, 2, (), code), table=[(FuncKind.BUILTIN, name)],
                 constants=consts, signatures=SIG)
    return VirtualMachine(Contents(exe), FakeLibrary()).run("main", [np.ones(2, np.float32)])


def test_loop_builtins_given_the_wrong_values_fail_cleanly():
    with pytest.raises(PackError, match="pushes onto something that is not a stack"):
        run_one("stack_push", [], (R, 0), (R, 0))
    with pytest.raises(PackError, match="finishes a stack it did not make"):
        run_one("stack_finish", ["float32"], (R, 0), (IMM, 0), (IMM, 0), (R, 0), (C, 0))
    with pytest.raises(RunInputError, match=r"a loop counter must hold one element, got \[2\]"):
        run_one("loop_continue", [], (R, 0), (R, 0), (R, 0))
    with pytest.raises(PackError, match="bytecode function 'main' at 0"):
        run_one("dim_size", [], (R, 0), (IMM, 5))
    (size,) = run_one("dim_size", [], (R, 0), (IMM, 0))
    assert size.shape == () and size == 2 and size.dtype == np.int64


def growing_scan_module() -> IRModule:
    """A Loop whose scan output is its growing carried value: a different shape each
    iteration, which ONNX does not allow (and numpy could not stack)."""
    mod = IRModule()
    d = SizeVar("d")
    bb = FunctionBuilder()
    bb.param("i", T(dtype="int64"))
    c, x = bb.param("c", T(dtype="bool")), bb.param("x", T(d))
    y = bb.bind(G.CallTIR("grow", (x,), T(d + 1)), T(d + 1), "y")
    mod.functions["body"] = bb.finish([c, y, y], ["c", "y", "s"])
    bb = FunctionBuilder()
    x, m = bb.param("x", T(1)), bb.param("m", T(dtype="int64"))
    e = G.Loop("body", m, None, (x,), ())
    r = bb.bind(e, G.infer_control_flow(e, mod.functions), "r")
    mod.functions["main"] = bb.finish([bb.get_item(r, 1, "s")], ["s"])
    return mod


class GrowLibrary(FakeLibrary):
    KERNELS = {**FakeLibrary.KERNELS, "grow": lambda x, out: np.copyto(out, np.append(x, 0))}


def test_scan_outputs_of_changing_shape_are_an_input_error():
    exe = compile_module(growing_scan_module())
    vm = VirtualMachine(Contents(exe), GrowLibrary())
    (one,) = vm.run("main", [np.ones(1, np.float32), np.array(1, np.int64)])
    assert one.shape == (1, 2)
    with pytest.raises(RunInputError, match=r"a scan output is float32\[2\] in one iteration "
                                            r"and float32\[3\] in another"):
        vm.run("main", [np.ones(1, np.float32), np.array(2, np.int64)])


def test_profile_counts_each_iteration():
    exe = compile_module(growing_scan_module())
    vm = VirtualMachine(Contents(exe), GrowLibrary(), profile=True)
    vm.run("main", [np.ones(1, np.float32), np.array(1, np.int64)])
    rows = {(r.kind, r.name): r for r in vm.profile_rows()}
    assert rows[("kernel", "grow")].calls == 1
    assert ("builtin", "control flow") in rows and ("builtin", "copies") in rows
    assert abs(sum(r.share for r in rows.values()) - 1) < 1e-9


def test_a_counter_that_overflows_is_a_pack_error():
    with pytest.raises(PackError, match="the value 300, which uint8 cannot hold"):
        run_one("scalar", ["uint8"], (IMM, 300), (C, 0))
