"""The C runtime's bytecode decoder and verifier (runtime_c/src/bytecode.c, verify.c): packs
from `tcc.compile` open, and a pack breaking any rule of tcc/rt/pack.py's
verify_executable is refused by both readers with the same message, the C one as one
`error: PATH: ...` line with exit status 2 (also under ASan and UBSan)."""

from __future__ import annotations

import copy
import io
import os
import random
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

import tcc
from tcc.rt.errors import PackError
from tcc.rt.format import (
    BUILTINS,
    INT64_MAX,
    NO_REG,
    ArgKind,
    Executable,
    FuncKind,
    Instr,
    Op,
    VMFunction,
    decode,
)
from tcc.rt.pack import read_pack
from tcc.rt.vm import BUILTIN_CATEGORIES
from tests.emit.test_vm_loops import onnx_loop_model
from tests.frontend.test_control_flow import _if_model
from tests.runtime_c.test_reader import (
    HAVE_TOOLS,
    RUNTIME,
    _bytecode,
    _make,
    _sanitizers_work,
    assert_refused,
    info,
    repack,
)

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")

REG, IMM, CONST = ArgKind.REG, ArgKind.IMM, ArgKind.CONST
BODY = "main_loop0_body"
ODD = "it's\t\x01\x7f\u0085\u00e9\n"  # quoted by repr with escapes, in C as in Python


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Path:
    return _make(tmp_path_factory.mktemp("tccrt-build"))


@pytest.fixture(scope="session")
def loop_pack(tmp_path_factory) -> bytes:
    """A pack with a loop head, a VM function call, kernels, a weight and every kind of
    builtin argument (see its disassembly in docs/vm.md, "Loops")."""
    path = tmp_path_factory.mktemp("loop") / "loop.tvmpack"
    tcc.compile(onnx_loop_model(), output=path)
    return path.read_bytes()


def test_compiled_packs_open_in_c_and_python(build, loop_pack, tmp_path):
    if_path = tmp_path / "if.tvmpack"
    tcc.compile(_if_model(), output=if_path)
    loop_path = tmp_path / "loop.tvmpack"
    loop_path.write_bytes(loop_pack)
    for path in (if_path, loop_path):
        r = info(build, path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        read_pack(path).close()
    with read_pack(loop_path) as contents:
        main = contents.executable.function("main")
    assert any(i.op == Op.GOTO and i.a < 0 for i in main.code)  # a loop head was verified


# -- breaking one rule at a time ---------------------------------------------------------------


def _entry(exe: Executable, kind: FuncKind, name: str) -> int:
    """The table index of (kind, name), appended when absent."""
    if (kind, name) not in exe.table:
        exe.table.append((kind, name))
    return exe.table.index((kind, name))


def _const(exe: Executable, value) -> int:
    exe.constants.append(value)
    return len(exe.constants) - 1


def _first_call(exe: Executable, f: VMFunction, callee: str) -> int:
    return next(pc for pc, i in enumerate(f.code) if i.op == Op.CALL and exe.table[i.a][1] == callee)


def _set_call(exe: Executable, fname: str, callee: str, **change):
    """Change the first call of `callee` in `fname` (fields of Instr, or one argument by
    position as arg=(position, (kind, value)))."""
    f = exe.function(fname)
    pc = _first_call(exe, f, callee)
    ins = f.code[pc]
    if "arg" in change:
        at, kv = change.pop("arg")
        args = list(ins.args)
        args[at] = kv
        change["args"] = tuple(args)
    f.code[pc] = Instr(ins.op, change.get("a", ins.a), change.get("b", ins.b), change.get("args", ins.args))


def _set_const_arg(exe: Executable, fname: str, callee: str, position: int, value) -> None:
    """Point argument `position` of the first call of `callee` at a new constant."""
    _set_call(exe, fname, callee, arg=(position, (CONST, _const(exe, value))))


def _jump(exe: Executable, op: Op, **change):
    """Change main's first `op` instruction (its loop's goto or if)."""
    code = exe.function("main").code
    pc = next(pc for pc, i in enumerate(code) if i.op == op)
    ins = code[pc]
    code[pc] = Instr(op, change.get("a", ins.a), change.get("b", ins.b))


def _cycle(exe: Executable) -> None:
    """aaa calls zzz, which calls aaa."""
    a, z = _entry(exe, FuncKind.VM, "aaa"), _entry(exe, FuncKind.VM, "zzz")
    exe.functions.append(VMFunction("zzz", 0, 1, (), [Instr(Op.CALL, a, 0), Instr(Op.RET, 0)]))
    exe.functions.append(VMFunction("aaa", 0, 1, (), [Instr(Op.CALL, z, 0), Instr(Op.RET, 0)]))


def _self_call(exe: Executable) -> None:
    """The loop body calls itself just before it returns."""
    body = exe.function(BODY)
    body.code.insert(-1, Instr(Op.CALL, _entry(exe, FuncKind.VM, BODY), NO_REG, ((REG, 0),) * 6))


def positions(exe: Executable) -> dict:
    """Where the cases below act in the loop pack, so their messages follow its code."""
    body, main = exe.function(BODY), exe.function("main")
    head = next(pc for pc, i in enumerate(main.code) if i.op == Op.IF)
    goto = next(pc for pc, i in enumerate(main.code) if i.op == Op.GOTO)
    at = {name: _first_call(exe, body, name) for name in
          ("match_shape", "load_constant", "make_shape", "alloc_tensor", "less_kernel", "make_tuple")}
    at.update({f"main_{name}": _first_call(exe, main, name) for name in ("scalar", "stack_finish", BODY)})
    return dict(at, main_body=at[f"main_{BODY}"], head=head, goto=goto, ret=len(body.code) - 1,
                params=body.num_params, regs=body.num_regs, main_regs=main.num_regs, table=len(exe.table),
                consts=len(exe.constants), main_len=len(main.code))


def _with_positions(edit):
    """An edit that takes the executable's positions as its second argument."""
    return lambda e: edit(e, positions(e))


def _in_body(field: str) -> str:
    return f"bytecode function '{BODY}' at {{{field}}}"


NOT_A_HEAD = "which is not a loop head (an if whose false target is just after the jump)"
LEAVES = "leaves the function or goes back"

# Each case: (bytecode edit, manifest edit, the message after the path, with positions).
CASES = {
    "duplicate function names": (lambda e: e.functions.append(copy.deepcopy(e.function("main"))), None,
                                 "bytecode defines a function twice"),
    "unknown builtin": (lambda e: _entry(e, FuncKind.BUILTIN, "frobnicate"), None,
                        "bytecode calls unknown builtin 'frobnicate'"),
    "unknown builtin with odd characters": (lambda e: _entry(e, FuncKind.BUILTIN, ODD), None,
                                            f"bytecode calls unknown builtin {ODD!r}"),
    "kernel not in the table": (lambda e: _entry(e, FuncKind.KERNEL, "nosuch_kernel"), None,
                                "bytecode calls kernel 'nosuch_kernel', which the kernel table lacks"),
    "kernel table emptied": (None, lambda m: m["kernels"].update(symbols=[]) or m.pop("kernel_origins", None),
                             "bytecode calls kernel 'less_kernel', which the kernel table lacks"),
    "undefined VM function": (lambda e: _entry(e, FuncKind.VM, "nowhere"), None,
                              "bytecode calls function 'nowhere', which it does not define"),
    "entry function missing": (None, lambda m: m["entry_functions"].update(other=m["entry_functions"].pop("main")),
                               "entry function 'other' is missing from the bytecode or takes other inputs"),
    "entry function takes other inputs": (
        None, lambda m: m["entry_functions"]["main"]["inputs"].pop(),
        "entry function 'main' is missing from the bytecode or takes other inputs"),
    "more params than registers": (lambda e: setattr(e.function(BODY), "num_regs", 1), None,
                                   f"bytecode function '{BODY}': {{params}} params and 1 registers are out of range"),
    "negative params": (lambda e: setattr(e.function(BODY), "num_params", -1), None,
                        f"bytecode function '{BODY}': -1 params and {{regs}} registers are out of range"),
    "too many registers": (lambda e: setattr(e.function(BODY), "num_regs", (1 << 20) + 1), None,
                           f"bytecode function '{BODY}': {{params}} params and 1048577 registers are out of range"),
    "missing final ret": (lambda e: e.function(BODY).code.pop(), None,
                          f"bytecode function '{BODY}' does not end with ret"),
    "no instructions": (lambda e: e.function(BODY).code.clear(), None,
                        f"bytecode function '{BODY}' does not end with ret"),
    "ret register out of range": (_with_positions(lambda e, p: e.function(BODY).code.__setitem__(
        -1, Instr(Op.RET, p["regs"]))), None, _in_body("ret") + ": register {regs} is out of range"),
    "dst register out of range": (_with_positions(lambda e, p: _set_call(e, BODY, "make_tuple", b=p["regs"])), None,
                                  _in_body("make_tuple") + ": register {regs} is out of range"),
    "dst register -2": (lambda e: _set_call(e, BODY, "make_tuple", b=-2), None,
                        _in_body("make_tuple") + ": register -2 is out of range"),
    "argument register out of range": (lambda e: _set_call(e, BODY, "make_tuple", arg=(1, (REG, -1))), None,
                                       _in_body("make_tuple") + ": register -1 is out of range"),
    "if register out of range": (_with_positions(lambda e, p: _jump(e, Op.IF, a=p["main_regs"])), None,
                                 "bytecode function 'main' at {head}: register {main_regs} is out of range"),
    "function index out of range": (lambda e: _set_call(e, BODY, "make_tuple", a=len(e.table)), None,
                                    _in_body("make_tuple") + ": function index {table} is out of range"),
    "negative function index": (lambda e: _set_call(e, BODY, "make_tuple", a=-1), None,
                                _in_body("make_tuple") + ": function index -1 is out of range"),
    "constant index out of range": (lambda e: _set_call(e, BODY, "match_shape", arg=(1, (CONST, len(e.constants)))),
                                    None, _in_body("match_shape") + ": constant {consts} is out of range"),
    "unknown argument kind": (lambda e: _set_call(e, BODY, "match_shape", arg=(0, (3, 0))), None,
                              _in_body("match_shape") + ": unknown argument kind 3"),
    "builtin argument count": (lambda e: _set_call(e, BODY, "match_shape", args=((REG, 0),)), None,
                               _in_body("match_shape") + ": builtin match_shape takes 4 arguments, got 1"),
    "builtin argument kind": (lambda e: _set_call(e, "main", "scalar", arg=(0, (REG, 0))), None,
                              "bytecode function 'main' at {main_scalar}: builtin scalar has an argument of the "
                              "wrong kind"),
    "make_tuple given an immediate": (lambda e: _set_call(e, BODY, "make_tuple", arg=(0, (IMM, 0))), None,
                                      _in_body("make_tuple") + ": builtin make_tuple has an argument of the wrong "
                                      "kind"),
    "builtin constant kind": (lambda e: _set_const_arg(e, BODY, "make_shape", 0, "a string"), None,
                              _in_body("make_shape") + ": builtin make_shape has a constant of the wrong kind"),
    "kernel given a constant": (lambda e: _set_call(e, BODY, "less_kernel", arg=(1, (CONST, 0))), None,
                                _in_body("less_kernel") + ": 'less_kernel' takes registers only"),
    "VM function given an immediate": (lambda e: _set_call(e, "main", BODY, arg=(0, (IMM, 0))), None,
                                       f"bytecode function 'main' at {{main_body}}: '{BODY}' takes registers only"),
    "VM function argument count": (lambda e: _set_call(e, "main", BODY, args=((REG, 0),) * 7), None,
                                   f"bytecode function 'main' at {{main_body}}: '{BODY}' takes {{params}} "
                                   "arguments"),
    "unknown dtype": (lambda e: _set_const_arg(e, BODY, "alloc_tensor", 1, "float7"), None,
                      _in_body("alloc_tensor") + ": unknown dtype"),
    "match_shape dtype": (lambda e: _set_const_arg(e, BODY, "match_shape", 2, "f32"), None,
                          _in_body("match_shape") + ": unknown dtype"),
    "stack_finish dtype": (lambda e: _set_const_arg(e, "main", "stack_finish", 4, "float7"), None,
                           "bytecode function 'main' at {main_stack_finish}: unknown dtype"),
    "scalar of floats": (lambda e: _set_const_arg(e, "main", "scalar", 1, "float32"), None,
                         "bytecode function 'main' at {main_scalar}: builtin scalar makes bool or integer tensors, "
                         "not float32"),
    "unknown weight": (lambda e: _set_const_arg(e, BODY, "load_constant", 0, "nope"), None,
                       _in_body("load_constant") + ": weight 'nope' is not in the pack"),
    "weights emptied": (None, lambda m: m["weights"].update(arrays={}),
                        _in_body("load_constant") + ": weight 'lim' is not in the pack"),
    "backward jump not to a loop head": (
        _with_positions(lambda e, p: _jump(e, Op.GOTO, a=p["head"] - 1 - p["goto"])), None,
        "bytecode function 'main' at {goto}: jump offset {before_head_offset} goes back to {before_head}, "
        + NOT_A_HEAD),
    "loop head exits elsewhere": (
        _with_positions(lambda e, p: _jump(e, Op.IF, b=p["goto"] + 2 - p["head"])), None,
        "bytecode function 'main' at {goto}: jump offset {head_offset} goes back to {head}, " + NOT_A_HEAD),
    "if jumping back": (lambda e: _jump(e, Op.IF, b=-1), None,
                        "bytecode function 'main' at {head}: jump offset -1 " + LEAVES),
    "goto onto itself": (lambda e: _jump(e, Op.GOTO, a=0), None,
                         "bytecode function 'main' at {goto}: jump offset 0 " + LEAVES),
    "jump past the end": (_with_positions(lambda e, p: _jump(e, Op.GOTO, a=p["main_len"] - p["goto"])), None,
                          "bytecode function 'main' at {goto}: jump offset {past_end} " + LEAVES),
    "jump before the start": (_with_positions(lambda e, p: _jump(e, Op.GOTO, a=-p["goto"] - 1)), None,
                              "bytecode function 'main' at {goto}: jump offset {before_start} " + LEAVES),
    "jump by INT64_MAX": (lambda e: _jump(e, Op.IF, b=INT64_MAX), None,
                          f"bytecode function 'main' at {{head}}: jump offset {INT64_MAX} " + LEAVES),
    "jump by INT64_MIN": (lambda e: _jump(e, Op.GOTO, a=-INT64_MAX - 1), None,
                          f"bytecode function 'main' at {{goto}}: jump offset {-INT64_MAX - 1} " + LEAVES),
    "direct recursion": (_self_call, None, f"bytecode function '{BODY}' calls itself (directly or not)"),
    "indirect recursion": (_cycle, None, "bytecode function 'aaa' calls itself (directly or not)"),
}

# Shape programs for make_shape in the loop body, and what is wrong with each.
SHAPE_PROGRAMS = {
    "empty": ([], "malformed shape program"),
    "negative rank": ([-1], "malformed shape program"),
    "stack underflow": ([1, 1, 2], "shape program has a bad token 2"),
    "binary op on one value": ([1, 3, 0, 5, 4], "shape program has a bad token 4"),
    "unknown token": ([1, 3, 0, 5, 9], "shape program has a bad token 9"),
    "leftover values": ([1, 4, 0, 1, 0, 2], "shape program leaves 2 values"),
    "no value": ([1, 0], "shape program leaves 0 values"),
    "heap slot out of range": ([1, 2, 1, 999], "shape program pushes a bad operand"),
    "negative heap slot": ([1, 2, 1, -1], "shape program pushes a bad operand"),
    "push without operand": ([1, 1, 0], "shape program pushes a bad operand"),
    "trailing words": ([1, 2, 0, 3, 9], "shape program has trailing words"),
    "runs past its end": ([1, 5, 0, 3], "shape program runs past its end"),
    "huge word count": ([1, INT64_MAX, 0, 3], "shape program runs past its end"),
    "huge rank": ([INT64_MAX, 2, 0, 3], "shape program runs past its end"),
}

# match_shape patterns for the body's first parameter, made in the executable they go to.
PATTERNS = {
    "empty": (lambda e: [], "malformed match_shape pattern"),
    "odd length": (lambda e: [1, 0], "malformed match_shape pattern"),
    "huge rank": (lambda e: [INT64_MAX, 0, 3], "malformed match_shape pattern"),
    "slot out of range": (lambda e: [1, 1, 999], "match_shape slot 999 is out of range"),
    "check slot negative": (lambda e: [1, 2, -1], "match_shape slot -1 is out of range"),
    "unknown mode": (lambda e: [1, 9, 0], "unknown match_shape mode 9"),
    "expression out of range": (lambda e: [1, 3, -1], "match_shape expression -1 is out of range"),
    "expression is a string": (lambda e: [1, 3, _const(e, "a string")], "match_shape expression {consts} is out of "
                               "range"),
    "expression of rank 2": (lambda e: [1, 3, _const(e, (2, 2, 0, 1, 2, 0, 2))], "malformed shape program"),
    "expression underflows": (lambda e: [1, 3, _const(e, (1, 1, 3))], "shape program has a bad token 3"),
}


def _shape_case(prog, message):
    return (lambda e: _set_const_arg(e, BODY, "make_shape", 0, tuple(prog)), None,
            _in_body("make_shape") + f": {message}")


def _pattern_case(make, message):
    return (lambda e: _set_call(e, BODY, "match_shape", arg=(3, (CONST, _const(e, tuple(make(e)))))), None,
            _in_body("match_shape") + f": {message}")


ALL_CASES = {
    **CASES,
    **{f"shape program: {k}": _shape_case(*v) for k, v in SHAPE_PROGRAMS.items()},
    **{f"pattern: {k}": _pattern_case(*v) for k, v in PATTERNS.items()},
}


def expected_messages(data: bytes) -> dict[str, str]:
    """Each case's message, its positions filled in from the pack's own code."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        p = positions(decode(tf.extractfile("bytecode.bin").read()))
    p.update(before_head=p["head"] - 1, before_head_offset=p["head"] - 1 - p["goto"],
             head_offset=p["head"] - p["goto"], past_end=p["main_len"] - p["goto"], before_start=-p["goto"] - 1)
    return {name: message.format(**p) for name, (_, _, message) in ALL_CASES.items()}


def forge(data: bytes, edit_exe=None, edit_manifest=None) -> bytes:
    """`data` with its executable and manifest edited, every hash made right again."""
    def members_edit(members):
        exe = decode(members["bytecode.bin"])
        edit_exe(exe)
        members["bytecode.bin"] = exe.encode()
    return repack(data, edit_manifest, members_edit if edit_exe else None)


def python_message(path: Path) -> str:
    with pytest.raises(PackError) as e:
        read_pack(path).close()
    return str(e.value)


def test_every_rule_is_refused_by_both_readers_with_one_message(build, loop_pack, tmp_path):
    path = tmp_path / "bad.tvmpack"
    messages = expected_messages(loop_pack)
    for name, (edit_exe, edit_manifest, _) in ALL_CASES.items():
        message = messages[name]
        path.write_bytes(forge(loop_pack, edit_exe, edit_manifest))
        assert python_message(path) == f"{path}: {message}", name
        assert assert_refused(info(build, path), name) == f"error: {path}: {message}", name
    # The forger alone changes nothing, so each refusal is its edit's.
    path.write_bytes(forge(loop_pack, lambda e: None, lambda m: None))
    assert info(build, path).returncode == 0
    read_pack(path).close()


def test_every_builtin_is_in_the_c_table_in_order():
    """verify.c's tccrt_builtin_specs and program.h's enum list tcc/rt/format.py BUILTINS."""
    specs = re.findall(r'\[TCCRT_B_(\w+)\] = \{"(\w+)", "([^"]*)", ([01]), "([a-z ]+)"\}',
                       (RUNTIME / "src" / "verify.c").read_text())
    assert [(n, a, r == "1") for _, n, a, r, _ in specs] == [(n, a, r) for n, (a, r) in BUILTINS.items()]
    assert all(e == n.upper() for e, n, _, _, _ in specs)
    # the profile rows of both runtimes group the builtins alike
    assert {n: c for _, n, _, _, c in specs} == {n: BUILTIN_CATEGORIES[n] for n in BUILTINS}
    enum = (RUNTIME / "src" / "program.h").read_text().split("typedef enum tccrt_builtin_e", 1)[1]
    names = re.findall(r"TCCRT_B_(\w+)", enum.split("}", 1)[0])
    assert names == [n.upper() for n in BUILTINS] + ["COUNT"]


def test_strings_holding_nul_are_refused(build, loop_pack, tmp_path):
    """A NUL byte cannot be held by the C runtime's strings, so both decoders refuse it."""
    path = tmp_path / "nul.tvmpack"
    path.write_bytes(forge(loop_pack, lambda e: e.constants.__setitem__(0, "input 'i'\0 of it")))
    line = assert_refused(info(build, path), "NUL in a constant")
    assert line == f"error: {path}: bytecode.bin: constant 0 contains a NUL byte, which tcc names and " \
                   "strings never hold"
    with pytest.raises(PackError, match="contains a NUL byte"):
        read_pack(path)


def _word_mutants(data: bytes, count: int, seed: int) -> list[bytes]:
    """The pack with one word of bytecode.bin set to an extreme or a neighbouring value (and
    the hashes made right), so the change reaches the decoder and the verifier."""
    rng = random.Random(seed)
    n = len(data)  # more than the words of bytecode.bin: a word index is taken modulo them
    extremes = [0, 1, 2, 3, 4, -1, -2, 1 << 20, INT64_MAX, -INT64_MAX - 1]
    out = []
    for _ in range(count):
        at, pick, step = rng.randrange(n), rng.randrange(len(extremes) + 1), rng.choice((-1, 1))

        def edit(w, at=at, pick=pick, step=step):
            k = at % len(w)
            return [*w[:k], extremes[pick] if pick < len(extremes) else w[k] + step, *w[k + 1:]]
        out.append(repack(data, members_edit=_bytecode(edit)))
    return out


def test_random_word_changes_get_one_verdict_from_both_readers(build, loop_pack, tmp_path):
    path = tmp_path / "w.tvmpack"
    refused = 0
    for i, blob in enumerate(_word_mutants(loop_pack, 150, seed=5)):
        path.write_bytes(blob)
        r = info(build, path)
        try:
            read_pack(path).close()
            py = None
        except PackError as e:
            py = str(e)
        if r.returncode == 0:
            assert py is None, f"mutant {i}: C accepted, Python refused: {py}"
            continue
        line = assert_refused(r, f"mutant {i}")
        refused += 1
        assert py is not None, f"mutant {i}: C refused ({line}), Python accepted"
        if f"{path}: bytecode.bin: " not in py:  # the verifier's messages are the same text
            assert line == f"error: {py}", f"mutant {i}"
    assert refused > 100  # the mutants reach the checks


def test_refusals_are_clean_under_address_and_undefined_sanitizers(loop_pack, tmp_path):
    if not _sanitizers_work(tmp_path):
        pytest.skip("the compiler cannot build with -fsanitize=address,undefined")
    san = _make(tmp_path / "asan", "OPT=-O1", "EXTRA_CFLAGS=-fsanitize=address,undefined "
                "-fno-sanitize-recover=undefined -fno-omit-frame-pointer -g")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:exitcode=99",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=98")
    path = tmp_path / "s.tvmpack"
    blobs = {"the loop pack": loop_pack,
             **{name: forge(loop_pack, e, m) for name, (e, m, _) in ALL_CASES.items()},
             **{f"mutant {i}": blob for i, blob in enumerate(_word_mutants(loop_pack, 60, seed=6))}}
    for name, blob in blobs.items():
        path.write_bytes(blob)
        r = subprocess.run([str(san / "tccrt"), "info", str(path)], capture_output=True, text=True, env=env)
        assert r.returncode in ((0,) if name == "the loop pack" else (0, 2) if "mutant" in name else (2,)), \
            f"{name}: exit {r.returncode}: {r.stderr[-2000:]}"
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, f"{name}: {r.stderr[-2000:]}"
