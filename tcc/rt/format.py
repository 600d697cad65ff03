"""The one definition of the `.tvmpack` format and of the VM bytecode (docs/tvmpack.md,
docs/vm.md).

Both the writer (`tcc.emit.pack`, `tcc.emit.vm`) and the readers (`tcc.rt.pack`, the C
runtime's mirrored header) take every constant from here, so the two sides cannot drift.
`Executable` is the in-memory bytecode module: the compiler builds it, `encode` turns it
into the flat little-endian int64 array stored as `bytecode.bin`, and `decode` turns such
an array back (checking only that it is well-framed; `tcc.rt.pack` verifies the rest).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

# -- the pack -----------------------------------------------------------------------------------

PACK_FORMAT = "tvmpack"
PACK_VERSION = 1
MANIFEST = "manifest.json"
BYTECODE = "bytecode.bin"
WEIGHTS = "weights.bin"
KERNELS_DIR = "kernels/"
OBJECT_SUFFIX = ".o"
SHARED_SUFFIX = ".so"
WEIGHT_ALIGN = 64  # bytes; tar puts member data at 512-byte boundaries, a multiple of it
TAR_BLOCK = 512
MANIFEST_HASH_FIELD = "manifest_sha256"  # sha256 of the manifest with this value zeroed
MAX_MANIFEST_BYTES = 16 << 20
KERNEL_ORIGINS_FIELD = "kernel_origins"  # optional manifest field: symbol -> binding names
DEVICE_KERNELS_FIELD = "device_kernels"  # optional manifest field: kind -> kernel library
DEVICE_KINDS = ("cuda",)  # the devices whose kernel libraries this runtime can load
# The dtypes a pack's tensors (weights, inputs, outputs) may have; tcc/rt/tensor.py maps each
# to its numpy dtype. Strings and other object dtypes are not among them.
PLAIN_DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
    "complex64 complex128".split()
)
LOW_PRECISION_DTYPES = frozenset(
    "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn "
    "int4 uint4 int2 uint2".split()
)
DTYPES = PLAIN_DTYPES | LOW_PRECISION_DTYPES | {"bfloat16"}
# DLPack (type code, bits) of each dtype a kernel's DLTensor may carry: DLPack's own codes,
# with two things tcc holds its own way. bfloat16 values are held as float32 (rounded to
# bfloat16), so their tensors are float32 ones; the 4- and 2-bit types keep their width in
# `bits` but take one byte per value (the value in the low bits), as ml_dtypes holds them.
KERNEL_DTYPES = {
    "bool": (6, 8),
    **{f"int{b}": (0, b) for b in (8, 16, 32, 64)},
    **{f"uint{b}": (1, b) for b in (8, 16, 32, 64)},
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (2, 32),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float4_e2m1fn": (17, 4),
    "int4": (0, 4),
    "uint4": (1, 4),
    "int2": (0, 2),
    "uint2": (1, 2),
}
SIGNATURE = "manifest.sig"  # optional member: the Ed25519 signature of manifest.json's bytes
SIGNATURE_BYTES = 64

# -- the bytecode -------------------------------------------------------------------------------

BYTECODE_MAGIC = int.from_bytes(b"TCCVMBC\x00", "little")
BYTECODE_VERSION = 1
NO_REG = -1  # the `dst` of a call whose result is dropped
INT64_MAX = (1 << 63) - 1  # the trip count of a Loop that only its condition ends


class Op(enum.IntEnum):
    """Instruction opcodes (the first word of each instruction)."""

    CALL = 1  # CALL func dst nargs (kind value)*nargs
    RET = 2  # RET reg
    GOTO = 3  # GOTO offset              (relative, in instructions; < 0 only to a loop head)
    IF = 4  # IF cond_reg false_offset   (falls through when true)


class ArgKind(enum.IntEnum):
    """How a CALL argument's value word is read."""

    REG = 0  # a register of the frame
    IMM = 1  # an int64 immediate
    CONST = 2  # an index into the constant pool


class FuncKind(enum.IntEnum):
    """Entries of the function table."""

    KERNEL = 0  # a symbol of the pack's kernel library (DLTensor** ABI)
    BUILTIN = 1  # a runtime builtin, by name (BUILTINS)
    VM = 2  # a function of this executable, by name


class ConstKind(enum.IntEnum):
    INTS = 0  # an int64 array
    STR = 1  # a UTF-8 string


class ShapeOp(enum.IntEnum):
    """Tokens of a shape program: postfix integer arithmetic over the frame's shape heap."""

    PUSH_INT = 0  # PUSH_INT value
    PUSH_VAR = 1  # PUSH_VAR slot
    ADD = 2
    SUB = 3
    MUL = 4
    FLOORDIV = 5
    FLOORMOD = 6
    MIN = 7
    MAX = 8
    # comparisons push 1 or 0; SELECT pops cond, a, b (cond pushed first) and pushes a if
    # cond is nonzero, else b. Conjunctions are MIN and disjunctions MAX of 0/1 values.
    EQ = 9
    NE = 10
    LT = 11
    LE = 12
    SELECT = 13


SHAPE_BINOPS = {
    "add": ShapeOp.ADD,
    "sub": ShapeOp.SUB,
    "mul": ShapeOp.MUL,
    "floordiv": ShapeOp.FLOORDIV,
    "floormod": ShapeOp.FLOORMOD,
    "min": ShapeOp.MIN,
    "max": ShapeOp.MAX,
}
SHAPE_CMPS = {"eq": ShapeOp.EQ, "ne": ShapeOp.NE, "lt": ShapeOp.LT, "le": ShapeOp.LE}


class DimMode(enum.IntEnum):
    """How match_shape treats one dimension (a (mode, value) pair in its pattern)."""

    STATIC = 0  # must equal value
    BIND = 1  # stores the dimension in heap slot `value`
    CHECK = 2  # must equal heap slot `value` (bound earlier)
    EXPR = 3  # must equal the one-dim shape program in constant `value`
    ANY = 4  # not checked


# Builtins by name: (argument kinds, returns a value). Kinds: r register, i immediate,
# s string constant, n int64-array constant, * any number of further registers.
BUILTINS: dict[str, tuple[str, bool]] = {
    "match_shape": ("rssn", False),  # value, what, dtype, pattern
    "make_shape": ("n", True),  # program
    "alloc_tensor": ("rs", True),  # shape, dtype
    "load_constant": ("s", True),  # weight name
    "reshape": ("rr", True),  # tensor, shape
    "copy": ("r", True),
    "make_tuple": ("*", True),
    "tuple_get_item": ("ri", True),
    "read_bool": ("r", True),
    # Loop and Scan (docs/vm.md, "Loops"): counters and flags are 0-d tensors, so the body
    # function takes them as it takes any tensor.
    "scalar": ("is", True),  # value, dtype -> a new 0-d tensor
    "scalar_add": ("ri", True),  # 0-d integer tensor, step -> a new 0-d tensor
    "loop_continue": ("rrr", True),  # counter, limit, condition -> counter < limit and cond
    "dim_size": ("ri", True),  # tensor, axis -> its length along axis as a 0-d int64 tensor
    "take": ("rrii", True),  # tensor, index, axis, reverse -> the slice at index along axis
    "stack_new": ("", True),  # -> an empty accumulator
    "stack_push": ("rr", False),  # accumulator, tensor
    "stack_finish": ("riirs", True),  # accumulator, axis, reverse, empty shape, dtype
    # Memory planning (docs/vm.md, "Memory planning"): the planned tensors of a call share
    # one arena, each at the offset tcc.rt.arena.plan_arena gives it.
    "alloc_arena": ("nn", True),  # byte sizes (a shape program), lifetimes -> a new arena
    "arena_view": ("rirs", True),  # arena, tensor index, shape, dtype -> a tensor inside it
    # Shapes read from tensors (docs/vm.md, "Shapes from tensors").
    "tensor_to_shape": ("rs", True),  # integer tensor (0-d or 1-d), what -> its values as a shape
    "match_dims": ("rsn", False),  # shape, what, pattern: match_shape's modes on its entries
    "assert_shape": ("ns", False),  # conditions (a shape program), message
    "make_sizes": ("n", True),  # program -> a shape whose entries may be negative (a step)
}
ARENA_ALIGN = 64  # bytes: an arena's start and every offset planned inside it
# Threads for parallel kernels (tcc/rt/threads.py, runtime_c/src/module.c): at most
# THREADS_PER_CORE per online core, and never above MAX_THREADS (libgomp faults far above it).
THREADS_PER_CORE = 8
MAX_THREADS = 1024


# -- the executable -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instr:
    """One decoded instruction. CALL: a = func index, b = dst, args = ((kind, value), ...);
    RET: a = register; GOTO: a = offset; IF: a = condition register, b = false offset."""

    op: Op
    a: int = 0
    b: int = 0
    args: tuple[tuple[int, int], ...] = ()


@dataclass
class VMFunction:
    name: str
    num_params: int
    num_regs: int
    heap_names: tuple[str, ...]  # one size variable per shape-heap slot (for messages)
    code: list[Instr] = field(default_factory=list)


@dataclass
class Executable:
    """Function table, constant pool and VM functions. Entry signatures and kernel origins
    (kernel symbol -> the graph bindings, i.e. ONNX node outputs, that call it) ride along
    for the manifest; they are not part of bytecode.bin."""

    table: list[tuple[FuncKind, str]] = field(default_factory=list)
    constants: list[tuple[int, ...] | str] = field(default_factory=list)
    functions: list[VMFunction] = field(default_factory=list)
    signatures: dict[str, dict] = field(default_factory=dict)
    kernel_origins: dict[str, list[str]] = field(default_factory=dict)

    def function(self, name: str) -> VMFunction:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def encode(self) -> bytes:
        return encode(self)

    def as_text(self) -> str:
        return disassemble(self)


class FormatError(ValueError):
    """bytecode.bin is not well framed (the reader turns this into a PackError)."""


def _str_words(s: str) -> list[int]:
    raw = s.encode("utf-8")
    raw += b"\x00" * (-len(raw) % 8)
    return [len(s.encode("utf-8"))] + list(struct.unpack(f"<{len(raw) // 8}q", raw))


def encode(exe: Executable) -> bytes:
    """The flat little-endian int64 encoding of `exe` (docs/vm.md, "Encoding")."""
    w = [BYTECODE_MAGIC, BYTECODE_VERSION, len(exe.table), len(exe.constants), len(exe.functions)]
    for kind, name in exe.table:
        w += [int(kind), *_str_words(name)]
    for c in exe.constants:
        if isinstance(c, str):
            w += [ConstKind.STR, *_str_words(c)]
        else:
            w += [ConstKind.INTS, len(c), *c]
    for f in exe.functions:
        code: list[int] = []
        for ins in f.code:
            code += _instr_words(ins)
        w += [*_str_words(f.name), f.num_params, f.num_regs, len(f.heap_names)]
        for h in f.heap_names:
            w += _str_words(h)
        w += [len(f.code), len(code), *code]
    return struct.pack(f"<{len(w)}q", *w)


def _instr_words(ins: Instr) -> list[int]:
    if ins.op == Op.CALL:
        return [Op.CALL, ins.a, ins.b, len(ins.args), *(x for kv in ins.args for x in kv)]
    if ins.op == Op.IF:
        return [Op.IF, ins.a, ins.b]
    return [int(ins.op), ins.a]


class _Words:
    """A bounds-checked cursor over the int64 words of bytecode.bin."""

    def __init__(self, data: bytes):
        if len(data) % 8:
            raise FormatError(f"size {len(data)} is not a multiple of 8 bytes")
        self.w = struct.unpack(f"<{len(data) // 8}q", data)
        self.i = 0

    def take(self, what: str) -> int:
        if self.i >= len(self.w):
            raise FormatError(f"truncated: ran out of words reading {what}")
        self.i += 1
        return self.w[self.i - 1]

    def count(self, what: str, words_each: int = 1) -> int:
        """A count that must fit in the words left (so a corrupted count cannot allocate)."""
        n = self.take(what)
        if n < 0 or n * words_each > len(self.w) - self.i:
            raise FormatError(f"{what} is {n} but only {len(self.w) - self.i} words remain")
        return n

    def string(self, what: str) -> str:
        n = self.take(f"{what} length")
        nw = -(-n // 8) if n >= 0 else -1
        if nw < 0 or nw > len(self.w) - self.i:
            raise FormatError(f"{what} length {n} runs past the end")
        raw = struct.pack(f"<{nw}q", *self.w[self.i : self.i + nw])
        self.i += nw
        try:
            text = raw[:n].decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{what} is not UTF-8") from None
        if "\x00" in text:
            raise FormatError(f"{what} contains a NUL byte, which tcc names and strings never hold")
        return text


def decode(data: bytes) -> Executable:
    """Parse bytecode.bin; raises FormatError when it is not well framed."""
    r = _Words(data)
    if r.take("magic") != BYTECODE_MAGIC:
        raise FormatError("bad magic (not tcc bytecode)")
    version = r.take("version")
    if version != BYTECODE_VERSION:
        raise FormatError(f"bytecode version {version}, this runtime reads {BYTECODE_VERSION}")
    n_table, n_consts, n_funcs = (r.count(w) for w in ("table size", "constants", "functions"))
    exe = Executable()
    for i in range(n_table):
        kind = r.take(f"table entry {i} kind")
        if kind not in FuncKind._value2member_map_:
            raise FormatError(f"table entry {i} has unknown kind {kind}")
        exe.table.append((FuncKind(kind), r.string(f"table entry {i} name")))
    for i in range(n_consts):
        kind = r.take(f"constant {i} kind")
        if kind == ConstKind.STR:
            exe.constants.append(r.string(f"constant {i}"))
        elif kind == ConstKind.INTS:
            n = r.count(f"constant {i} length")
            exe.constants.append(tuple(r.take("constant") for _ in range(n)))
        else:
            raise FormatError(f"constant {i} has unknown kind {kind}")
    for i in range(n_funcs):
        name = r.string(f"function {i} name")
        num_params, num_regs = r.take("num_params"), r.take("num_regs")
        heap = tuple(r.string(f"{name} heap name") for _ in range(r.count(f"{name} heap size")))
        n_instrs = r.count(f"{name} instruction count")
        n_words = r.count(f"{name} code length")
        end = r.i + n_words
        code = []
        for _ in range(n_instrs):
            code.append(_decode_instr(r, name, end))
        if r.i != end:
            raise FormatError(f"function {name!r}: code length {n_words} does not match its instructions")
        exe.functions.append(VMFunction(name, num_params, num_regs, heap, code))
    if r.i != len(r.w):
        raise FormatError(f"{len(r.w) - r.i} trailing words after the last function")
    return exe


def _decode_instr(r: _Words, fname: str, end: int) -> Instr:
    where = f"function {fname!r} instruction"
    op = r.take(where)
    if op == Op.CALL:
        func, dst = r.take(where), r.take(where)
        nargs = r.count(f"{where} argument count", 2)
        args = tuple((r.take(where), r.take(where)) for _ in range(nargs))
        ins = Instr(Op.CALL, func, dst, args)
    elif op == Op.IF:
        ins = Instr(Op.IF, r.take(where), r.take(where))
    elif op in (Op.RET, Op.GOTO):
        ins = Instr(Op(op), r.take(where))
    else:
        raise FormatError(f"{where} {r.i - 1}: unknown opcode {op}")
    if r.i > end:
        raise FormatError(f"function {fname!r}: an instruction runs past the code length")
    return ins


# -- disassembly --------------------------------------------------------------------------------


def disassemble(exe: Executable) -> str:
    """Readable text of every table entry, constant and function (deterministic)."""
    lines = ["; function table"]
    for i, (kind, name) in enumerate(exe.table):
        lines.append(f"  f{i} = {kind.name.lower()} {name}")
    lines.append("; constants")
    for i, c in enumerate(exe.constants):
        text = repr(c) if isinstance(c, str) else "[" + ", ".join(map(str, c)) + "]"
        lines.append(f"  c{i} = {text}")
    for f in exe.functions:
        heap = ", ".join(f"{i}:{n}" for i, n in enumerate(f.heap_names))
        lines.append(f"function {f.name}(params={f.num_params}, regs={f.num_regs}, heap=[{heap}])")
        for pc, ins in enumerate(f.code):
            lines.append(f"  {pc:3d}: {_instr_text(exe, ins, pc)}")
    return "\n".join(lines) + "\n"


def _arg_text(kind: int, value: int) -> str:
    return {ArgKind.REG: f"%{value}", ArgKind.IMM: f"{value}", ArgKind.CONST: f"c{value}"}.get(
        kind, f"?{kind}:{value}"
    )


def _instr_text(exe: Executable, ins: Instr, pc: int) -> str:
    if ins.op == Op.CALL:
        callee = exe.table[ins.a][1] if 0 <= ins.a < len(exe.table) else f"f{ins.a}?"
        args = ", ".join(_arg_text(k, v) for k, v in ins.args)
        dst = "" if ins.b == NO_REG else f"%{ins.b} = "
        return f"{dst}call {callee}({args})"
    if ins.op == Op.RET:
        return f"ret %{ins.a}"
    if ins.op == Op.GOTO:
        return f"goto {pc + ins.a}"
    return f"if %{ins.a} else goto {pc + ins.b}"
