"""The bytecode verifier and the VM on hand-written executables."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import tcc.emit.pack
from tcc.emit.pack import pack_bytes
from tcc.rt.errors import PackError, RunInputError
from tcc.rt.format import (
    NO_REG,
    ArgKind,
    Executable,
    FormatError,
    FuncKind,
    Instr,
    Op,
    ShapeOp,
    VMFunction,
    decode,
)
from tcc.rt.pack import read_pack
from tcc.rt.vm import VirtualMachine, eval_shape
from tests.emit.test_vm_compile import Contents, FakeLibrary

R, IMM, C = ArgKind.REG, ArgKind.IMM, ArgKind.CONST
SIG1 = {"inputs": [{"name": "x", "dtype": "float32", "shape": [2]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [2]}]}


def exe_of(*functions, table=(), constants=(), signatures=None):
    exe = Executable(list(table), list(constants), list(functions))
    exe.signatures = signatures if signatures is not None else {"main": SIG1}
    return exe


def load(tmp_path, exe, monkeypatch=None):
    """Pack `exe` as is (the writer's own consistency checks are skipped: these executables
    are meant to be wrong) and read it back."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tcc.emit.pack, "_check_references", lambda *a: None)
        data = pack_bytes(exe, None, "llvm", {})
    path = tmp_path / "x.tvmpack"
    path.write_bytes(data)
    return read_pack(path)


def identity_main(code, regs=2, heap=()):
    return VMFunction("main", 1, regs, tuple(heap), code)


def test_a_hand_written_program_runs(tmp_path):
    """main(x) = copy(x), jumping over a `ret x`."""
    table = [(FuncKind.BUILTIN, "copy")]
    code = [
        Instr(Op.CALL, 0, 1, ((R, 0),)),  # %1 = copy(%0)
        Instr(Op.GOTO, 2),
        Instr(Op.RET, 0),
        Instr(Op.RET, 1),
    ]
    with load(tmp_path, exe_of(identity_main(code), table=table)) as pc:
        vm = VirtualMachine(pc, FakeLibrary())
        x = np.array([1.0, 2.0], np.float32)
        (y,) = vm.run("main", [x])
        np.testing.assert_array_equal(y, x)
        assert y is not x


@pytest.mark.parametrize(
    "code, table, constants, message",
    [
        ([Instr(Op.RET, 5)], [], [], "register 5 is out of range"),
        ([Instr(Op.GOTO, 0), Instr(Op.RET, 0)], [], [], "jump offset 0 leaves the function or goes back"),
        ([Instr(Op.GOTO, 1), Instr(Op.GOTO, -1), Instr(Op.RET, 0)], [], [], "offset -1"),
        ([Instr(Op.IF, 0, 9), Instr(Op.RET, 0)], [], [], "offset 9 leaves"),
        ([Instr(Op.CALL, 0, 0, ())], [(FuncKind.BUILTIN, "copy")], [], "does not end with ret"),
        ([Instr(Op.CALL, 3, 0, ()), Instr(Op.RET, 0)], [], [], "function index 3 is out of range"),
        ([Instr(Op.CALL, 0, 0, ((R, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "explode")], [],
         "unknown builtin 'explode'"),
        ([Instr(Op.CALL, 0, 0, ((IMM, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "copy")], [],
         "builtin copy has an argument of the wrong kind"),
        ([Instr(Op.CALL, 0, 0, ((R, 0), (R, 0))), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "copy")], [],
         "builtin copy takes 1 arguments, got 2"),
        ([Instr(Op.CALL, 0, 0, ((C, 7),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "make_shape")], [],
         "constant 7 is out of range"),
        ([Instr(Op.CALL, 0, 0, ((C, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "make_shape")],
         [(1, 2, ShapeOp.PUSH_VAR, 3)], "shape program pushes a bad operand"),
        ([Instr(Op.CALL, 0, 0, ((C, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "make_shape")],
         [(1, 1, ShapeOp.ADD)], "bad token"),
        ([Instr(Op.CALL, 0, 0, ((C, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "make_shape")],
         ["text"], "constant of the wrong kind"),
        ([Instr(Op.CALL, 0, 0, ((C, 0),)), Instr(Op.RET, 0)], [(FuncKind.BUILTIN, "load_constant")],
         ["w"], "weight 'w' is not in the pack"),
        ([Instr(Op.CALL, 0, 0, ((R, 0), (C, 0), (C, 1), (C, 2))), Instr(Op.RET, 0)],
         [(FuncKind.BUILTIN, "match_shape")], ["x", "float32", (1, 1, 9)],
         "match_shape slot 9 is out of range"),
        ([Instr(Op.CALL, 0, 0, ((R, 0), (C, 0))), Instr(Op.RET, 0)],
         [(FuncKind.BUILTIN, "alloc_tensor")], ["float13"], "unknown dtype"),
    ],
)
def test_verifier_rejects(tmp_path, code, table, constants, message):
    with pytest.raises(PackError, match=message):
        load(tmp_path, exe_of(identity_main(code), table=table, constants=constants))


def test_verifier_rejects_recursion(tmp_path):
    table = [(FuncKind.VM, "f"), (FuncKind.VM, "main")]
    f = VMFunction("f", 1, 1, (), [Instr(Op.CALL, 1, 0, ((R, 0),)), Instr(Op.RET, 0)])
    main = identity_main([Instr(Op.CALL, 0, 1, ((R, 0),)), Instr(Op.RET, 1)])
    with pytest.raises(PackError, match="calls itself"):
        load(tmp_path, exe_of(f, main, table=table))


def test_verifier_checks_vm_call_arity(tmp_path):
    table = [(FuncKind.VM, "f")]
    f = VMFunction("f", 2, 2, (), [Instr(Op.RET, 0)])
    main = identity_main([Instr(Op.CALL, 0, 1, ((R, 0),)), Instr(Op.RET, 1)])
    with pytest.raises(PackError, match="'f' takes 2 arguments"):
        load(tmp_path, exe_of(f, main, table=table))


def test_verifier_checks_entry_signatures(tmp_path):
    sig = {"main": {"inputs": [], "outputs": []}}
    with pytest.raises(PackError, match="entry function 'main' .* takes other inputs"):
        load(tmp_path, exe_of(identity_main([Instr(Op.RET, 0)]), signatures=sig))


def test_reading_an_unwritten_register_is_refused_at_load(tmp_path):
    with pytest.raises(PackError, match="'main' at 0: reads register 1 before anything writes it"):
        load(tmp_path, exe_of(identity_main([Instr(Op.RET, 1)])))


def test_decode_rejects_bad_framing():
    good = exe_of(identity_main([Instr(Op.RET, 0)])).encode()
    with pytest.raises(FormatError, match="bad magic"):
        decode(b"\0" * 8 + good[8:])
    with pytest.raises(FormatError, match="version 7"):
        decode(good[:8] + struct.pack("<q", 7) + good[16:])
    with pytest.raises(FormatError, match="truncated|remain|past"):
        decode(good[:-8])
    with pytest.raises(FormatError, match="multiple of 8"):
        decode(good[:-3])
    with pytest.raises(FormatError, match="trailing"):
        decode(good + b"\0" * 8)
    huge = bytearray(good)
    huge[16:24] = struct.pack("<q", 1 << 60)  # a table size no file could hold
    with pytest.raises(FormatError, match="only .* words remain"):
        decode(bytes(huge))


def test_shape_programs():
    heap, names = [6, 4], ("n", "m")
    add = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_VAR, 1, ShapeOp.ADD]
    div = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_INT, -4, ShapeOp.FLOORDIV]
    mx = [ShapeOp.PUSH_INT, 3, ShapeOp.PUSH_VAR, 1, ShapeOp.MAX]
    mod = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_VAR, 1, ShapeOp.FLOORMOD]
    prog = (4, len(add), *add, len(div), *div, len(mx), *mx, len(mod), *mod)
    assert eval_shape(prog, heap, names) == (10, -2, 4, 2)
    zero = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_INT, 0, ShapeOp.FLOORDIV]
    with pytest.raises(RunInputError, match="divides by zero"):
        eval_shape((1, len(zero), *zero), heap, names)
    with pytest.raises(PackError, match="size variable 'm' before binding"):
        eval_shape((1, 2, ShapeOp.PUSH_VAR, 1), [6, None], names)


def test_a_shape_value_fails_only_where_the_dimension_uses_it():
    """A select's untaken branch may overflow or divide by zero (`select(end < 0, end + n,
    end)` with end = INT64_MAX: a slice to the end); the taken one is an input error."""
    big = (1 << 63) - 1
    heap, names = [big, 0], ("end", "step")
    overflow = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_INT, 4, ShapeOp.ADD]
    by_zero = [ShapeOp.PUSH_INT, 8, ShapeOp.PUSH_VAR, 1, ShapeOp.FLOORDIV]
    negative = [ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_INT, 0, ShapeOp.LT]
    untaken = [*negative, *overflow, ShapeOp.PUSH_VAR, 0, ShapeOp.SELECT]
    zero = [ShapeOp.PUSH_VAR, 1, ShapeOp.PUSH_INT, 0, ShapeOp.EQ]
    guarded = [*zero, ShapeOp.PUSH_INT, 1, *by_zero, ShapeOp.SELECT]
    assert eval_shape((2, len(untaken), *untaken, len(guarded), *guarded), heap, names) == (big, 1)
    taken = [*negative, ShapeOp.PUSH_VAR, 0, *overflow, ShapeOp.SELECT]
    with pytest.raises(RunInputError, match="overflows int64"):
        eval_shape((1, len(taken), *taken), heap, names)
    lost = [*overflow, ShapeOp.PUSH_INT, 9, ShapeOp.MIN]  # a failed operand fails the result
    with pytest.raises(RunInputError, match="overflows int64"):
        eval_shape((1, len(lost), *lost), heap, names)
    with pytest.raises(RunInputError, match="divides by zero"):
        eval_shape((1, len(by_zero), *by_zero), heap, names)


def test_negative_computed_shape_is_an_input_error():
    table = [(FuncKind.BUILTIN, "match_shape"), (FuncKind.BUILTIN, "make_shape")]
    prog = (1, 5, ShapeOp.PUSH_VAR, 0, ShapeOp.PUSH_INT, 3, ShapeOp.SUB)
    code = [Instr(Op.CALL, 0, NO_REG, ((R, 0), (C, 0), (C, 1), (C, 2))),
            Instr(Op.CALL, 1, 1, ((C, 3),)), Instr(Op.RET, 0)]
    sig = {"main": {"inputs": [{"name": "x", "dtype": "float32", "shape": ["n"]}],
                    "outputs": [{"name": "x", "dtype": "float32", "shape": ["n"]}]}}
    exe = exe_of(identity_main(code, heap=("n",)), table=table,
                 constants=["input 'x'", "float32", (1, 1, 0), prog], signatures=sig)
    vm = VirtualMachine(Contents(exe), FakeLibrary())
    assert vm.run("main", [np.zeros(3, np.float32)])[0].shape == (3,)
    with pytest.raises(RunInputError, match=r"computed shape \[-1\] has a negative dimension"):
        vm.run("main", [np.zeros(2, np.float32)])


def test_shape_results_are_remembered_by_the_sizes_they_read(tmp_path):
    """A machine remembers each shape program's result by the sizes it reads: runs at other
    sizes (a Slice's run-time bounds, an input's length) get their own, and runs at sizes
    seen before get the same shapes as the first time."""
    import tcc
    import tcc.rt
    from tcc.rt.vm import read_slots
    from tests.helpers import node_model

    model = node_model("Slice", {"x": (np.float32, (3, "n")), "starts": (np.int64, (1,)),
                               "ends": (np.int64, (1,))}, ["y"],
                       initializers=[("axes", np.array([1], np.int64))])
    tcc.compile(model, output=tmp_path / "m.tvmpack")
    big = np.iinfo(np.int64).max
    cases = [(5, -2, big), (5, 1, 3), (9, -2, big), (5, -2, big), (9, 0, -1), (5, 1, 3)]
    with tcc.rt.load(tmp_path / "m.tvmpack") as m:
        for n, start, end in cases:
            x = np.arange(3 * n, dtype=np.float32).reshape(3, n)
            (y,) = m["main"](x, np.array([start], np.int64), np.array([end], np.int64))
            np.testing.assert_array_equal(y, x[:, start:end])
    prog = (2, 2, ShapeOp.PUSH_VAR, 3, 7, ShapeOp.PUSH_INT, 4, ShapeOp.PUSH_VAR, 1,
            ShapeOp.PUSH_VAR, 3, ShapeOp.ADD, ShapeOp.MUL)
    assert read_slots(prog) == (3, 1)
