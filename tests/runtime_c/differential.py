"""Differential fuzzing of the two pack verifiers: tcc/rt/pack.py and runtime_c/src (through
libtccrt.so, in this process). Each mutant is a valid pack whose bytecode is changed, either
one raw word or one decoded field (a register, a jump, an instruction dropped, doubled or
swapped, a count, a table entry), with every hash re-sealed so that the change reaches the
decoder and the verifier. Both must accept it, or both refuse it with the same message.

    python -m tests.runtime_c.differential --mutants 100000 [--seed S] [--build DIR]

prints the counts and every disagreement (none expected); tests/runtime_c/test_verifier_
differential.py runs a share of this on every test run.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import hashlib
import json
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tcc.rt.errors import PackError
from tcc.rt.format import BUILTINS, INT64_MAX, NO_REG, ArgKind, FormatError, Instr, Op, decode
from tcc.rt.pack import check_pack_bytes
from tests.runtime_c.test_reader import members_of, seal, tar

# Refusals where the C reader is documented stricter than Python's (docs/c-runtime.md):
# NUL bytes in names and strings, lone surrogates.
C_STRICTER = ("contains a NUL byte", "\\u0000 in a string", "lone surrogate")
NAME = "<memory>"


class CReader:
    """tccrt_pack_open_memory from libtccrt.so: None when accepted, else the message."""

    def __init__(self, library: Path):
        self.lib = ctypes.CDLL(str(library))
        self.lib.tccrt_pack_open_memory.restype = ctypes.c_int
        self.lib.tccrt_pack_open_memory.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                                    ctypes.POINTER(ctypes.c_void_p)]
        self.lib.tccrt_pack_release.argtypes = [ctypes.c_void_p]
        self.lib.tccrt_last_error.restype = ctypes.c_char_p

    def __call__(self, data: bytes) -> str | None:
        pack = ctypes.c_void_p()
        if self.lib.tccrt_pack_open_memory(data, len(data), ctypes.byref(pack)) == 0:
            self.lib.tccrt_pack_release(pack)
            return None
        return self.lib.tccrt_last_error().decode("utf-8", "replace")


def python_reader(data: bytes) -> str | None:
    try:
        check_pack_bytes(data, NAME)
    except PackError as e:
        return str(e)
    return None


class Sealer:
    """A pack split into members once; `seal(bytecode)` is the pack with that bytecode.bin
    and every hash made right, as tcc's writer lays a pack out."""

    def __init__(self, data: bytes):
        self.members = members_of(data)
        self.manifest = json.loads(self.members.pop("manifest.json"))
        self.bytecode = self.members["bytecode.bin"]

    def seal(self, bytecode: bytes) -> bytes:
        members = dict(self.members, **{"bytecode.bin": bytecode})
        manifest = copy.deepcopy(self.manifest)
        manifest["members"]["bytecode.bin"] = {"size": len(bytecode),
                                               "sha256": hashlib.sha256(bytecode).hexdigest()}
        members["manifest.json"] = seal(manifest)
        return tar(members)


# -- mutations ------------------------------------------------------------------------------------

EXTREMES = [0, 1, 2, 3, 4, -1, -2, 1 << 20, INT64_MAX, -INT64_MAX - 1]


def mutate_word(bytecode: bytes, rng: random.Random) -> bytes:
    words = list(struct.unpack(f"<{len(bytecode) // 8}q", bytecode))
    k = rng.randrange(len(words))
    words[k] = rng.choice(EXTREMES) if rng.random() < 0.5 else max(min(words[k] + rng.choice((-1, 1)), INT64_MAX),
                                                                     -INT64_MAX - 1)
    return struct.pack(f"<{len(words)}q", *words)


def _near(rng: random.Random, value: int, limit: int) -> int:
    return rng.choice([value - 1, value + 1, 0, limit - 1, limit, -1, rng.randrange(max(limit, 1))])


def mutate_field(bytecode: bytes, rng: random.Random) -> bytes:
    try:
        exe = decode(bytecode)
    except FormatError:  # a first mutation broke the framing: go on at the word level
        return mutate_word(bytecode, rng)
    f = rng.choice(exe.functions)
    code, n = f.code, len(f.code)
    pc = rng.randrange(n)
    ins = code[pc]
    what = rng.randrange(10)
    if what == 0 and ins.op == Op.CALL and ins.args:  # a register or constant argument
        k = rng.randrange(len(ins.args))
        kind, value = ins.args[k]
        limit = f.num_regs if kind == ArgKind.REG else len(exe.constants)
        args = list(ins.args)
        args[k] = (kind, _near(rng, value, limit))
        code[pc] = Instr(ins.op, ins.a, ins.b, tuple(args))
    elif what == 1 and ins.op == Op.CALL:  # the destination
        code[pc] = Instr(ins.op, ins.a, rng.choice([NO_REG, _near(rng, ins.b, f.num_regs)]), ins.args)
    elif what == 2:  # the register of a ret or an if, a jump's offset, a call's function
        if ins.op in (Op.RET, Op.IF) and rng.random() < 0.6:
            code[pc] = Instr(ins.op, _near(rng, ins.a, f.num_regs), ins.b, ins.args)
        elif ins.op == Op.IF:
            code[pc] = Instr(ins.op, ins.a, _near(rng, ins.b, n - pc), ins.args)
        elif ins.op == Op.GOTO:
            code[pc] = Instr(ins.op, _near(rng, ins.a, n - pc), ins.b, ins.args)
        else:
            code[pc] = Instr(ins.op, _near(rng, ins.a, len(exe.table)), ins.b, ins.args)
    elif what == 3 and n > 1:  # drop an instruction
        del code[pc]
    elif what == 4:  # repeat one
        code.insert(pc, ins)
    elif what == 5 and n > 1:  # swap two neighbours
        other = min(pc + 1, n - 1) if pc < n - 1 else pc - 1
        code[pc], code[other] = code[other], code[pc]
    elif what == 6:
        f.num_params = _near(rng, f.num_params, f.num_regs + 1)
    elif what == 7:
        f.num_regs = _near(rng, f.num_regs, f.num_regs + 1)
    elif what == 8 and exe.table:  # a table entry renamed to another one's name, or a builtin's
        k = rng.randrange(len(exe.table))
        kind, _ = exe.table[k]
        names = [name for _, name in exe.table] + list(BUILTINS)
        exe.table[k] = (kind, rng.choice(names))
    elif what == 9 and ins.op == Op.CALL and ins.args:  # an argument of another kind
        k = rng.randrange(len(ins.args))
        args = list(ins.args)
        args[k] = (rng.choice([ArgKind.REG, ArgKind.IMM, ArgKind.CONST]), ins.args[k][1])
        code[pc] = Instr(ins.op, ins.a, ins.b, tuple(args))
    else:
        return mutate_word(bytecode, rng)
    try:
        return exe.encode()
    except (FormatError, struct.error, OverflowError, ValueError):
        return mutate_word(bytecode, rng)


def mutant(sealer: Sealer, rng: random.Random) -> bytes:
    bytecode = sealer.bytecode
    for _ in range(1 if rng.random() < 0.8 else 2):
        bytecode = (mutate_field if rng.random() < 0.7 else mutate_word)(bytecode, rng)
    return sealer.seal(bytecode)


# -- the comparison -------------------------------------------------------------------------------


def stage(message: str | None) -> str:
    if message is None:
        return "accepted"
    text = message.removeprefix(f"{NAME}: ")
    if text.startswith("bytecode.bin: "):
        return "decoder"
    if text.startswith("bytecode function") and "before anything writes it" in text or "without register" in text:
        return "written-before-read"
    return "verifier" if text.startswith(("bytecode", "entry function")) else "other"


def run(seeds: list[bytes], library: Path, mutants: int, seed: int, report=None) -> tuple[Counter, list[str]]:
    """(outcome counts, disagreements) over `mutants` mutants of `seeds`."""
    c_reader = CReader(library)
    sealers = [Sealer(s) for s in seeds]
    for s in seeds:
        assert python_reader(s) is None and c_reader(s) is None, "a seed pack must be valid"
    rng = random.Random(seed)
    counts: Counter = Counter()
    disagreements: list[str] = []
    for i in range(mutants):
        data = mutant(sealers[i % len(sealers)], rng)
        py, c = python_reader(data), c_reader(data)
        if py == c or (py is not None and c is not None and any(t in c for t in C_STRICTER)):
            counts[stage(c)] += 1
            continue
        counts["disagree"] += 1
        disagreements.append(f"mutant {i} (seed {seed}): Python {py!r}, C {c!r}")
        if report:
            report(disagreements[-1])
    return counts, disagreements


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", type=Path, help="a runtime_c build folder (default: build one)")
    args = ap.parse_args(argv)
    from tests.runtime_c.capi import build_runtime
    from tests.runtime_c.seeds import seed_packs

    with tempfile.TemporaryDirectory() as tmp:
        build = args.build or build_runtime(Path(tmp) / "build")
        seeds = seed_packs(Path(tmp))
        t0 = time.perf_counter()
        counts, bad = run(seeds, build / "libtccrt.so", args.mutants, args.seed,
                          report=lambda line: print(line, file=sys.stderr))
    print(f"{args.mutants} mutants of {len(seeds)} packs in {time.perf_counter() - t0:.0f} s, seed {args.seed}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
