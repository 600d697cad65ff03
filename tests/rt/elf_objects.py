"""The smallest ELF shared object the runtimes' check accepts (tcc/rt/elf.py): a header, a
dynamic symbol table and its strings, nothing loadable. Packs made for tests that never load
their kernels carry one, so they stay small and pass verification."""

from __future__ import annotations

import struct

from tcc.rt.pack import RUNTIME_FUNCTIONS


def minimal_shared_object(symbols, machine: int = 62) -> bytes:
    """An ELF64 little-endian shared object whose .dynsym defines `symbols` and the runtime's
    functions; `machine` is e_machine (62: x86_64)."""
    names = sorted(set(symbols) | set(RUNTIME_FUNCTIONS))
    strings = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    syms = bytes(24)  # the null symbol
    at = 1
    for n in names:
        syms += struct.pack("<IBBHQQ", at, 0x12, 0, 1, 0, 0)  # GLOBAL FUNC, defined in section 1
        at += len(n) + 1
    sym_off = 64
    str_off = sym_off + len(syms)
    sh_off = -(-(str_off + len(strings)) // 8) * 8
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, machine, 1, 0, 0,
                         sh_off, 0, 64, 0, 0, 64, 3, 0)
    sections = bytes(64)
    sections += struct.pack("<IIQQQQIIQQ", 0, 11, 2, 0, sym_off, len(syms), 2, 1, 8, 24)  # .dynsym
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 2, 0, str_off, len(strings), 0, 0, 1, 0)  # .dynstr
    body = header + syms + strings
    return body + bytes(sh_off - len(body)) + sections
