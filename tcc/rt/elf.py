"""Just enough ELF to check a pack's shared object before anything loads it.

`exported_functions` reads the header and the dynamic symbol table (`.dynsym` and its string
table), bounds-checking every offset, and returns the machine and the names of the functions
the object defines. Pack verification uses it to refuse a shared object that lacks a kernel
of the kernel table or was built for another machine, so no such object is ever opened:
`dlopen` runs an object's constructors before any symbol can be looked up. This is a check
for mistakes and corruption, not a defence against a crafted object (whose section headers
may say anything); signatures are (docs/security.md). runtime_c/src/elf.c is the same check,
with the same messages.
"""

from __future__ import annotations

import platform
import struct

# ELF e_machine of each architecture tcc's CPU target names in its triple.
MACHINES = {"x86_64": 62, "aarch64": 183, "riscv64": 243}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym
_SHT_DYNSYM, _ET_DYN, _STT_FUNC, _STB_GLOBAL, _STB_WEAK = 11, 3, 2, 1, 2


class ElfError(Exception):
    """The shared object is not one a runtime can check; the message says why."""


def host_architecture() -> str:
    machine = platform.machine().lower()
    return _ALIASES.get(machine, machine)


def triple_architecture(target: str) -> str | None:
    """The architecture of an `llvm -mtriple=ARCH-...` target string; None without a triple."""
    for word in target.split():
        if word.startswith("-mtriple="):
            arch = word.removeprefix("-mtriple=").split("-")[0].lower()
            return _ALIASES.get(arch, arch)
    return None


def exported_functions(data) -> tuple[int, set[str]]:
    """(e_machine, names of the defined global or weak functions) of an ELF64 little-endian
    shared object, or ElfError."""
    data = memoryview(data)
    size = len(data)
    if size < _HEADER.size or bytes(data[:4]) != b"\x7fELF":
        raise ElfError("is not an ELF file")
    ident, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, _ = _HEADER.unpack_from(data)
    if ident[4] != 2 or ident[5] != 1:
        raise ElfError("is not a 64-bit little-endian ELF file")
    if e_type != _ET_DYN:
        raise ElfError(f"is not a shared object (ELF type {e_type})")
    if shentsize != _SECTION.size or shnum == 0 or shoff > size or shnum * _SECTION.size > size - shoff:
        raise ElfError("has a malformed section header table")
    sections = [_SECTION.unpack_from(data, shoff + i * _SECTION.size) for i in range(shnum)]
    dynsym = [s for s in sections if s[1] == _SHT_DYNSYM]
    if len(dynsym) != 1:
        raise ElfError("has no dynamic symbol table" if not dynsym else "has two dynamic symbol tables")
    _, _, _, _, sym_off, sym_size, link, _, _, entsize = dynsym[0]
    if entsize != _SYMBOL.size or sym_off > size or sym_size > size - sym_off or sym_size % entsize:
        raise ElfError("has a malformed dynamic symbol table")
    if link >= shnum:
        raise ElfError("has a dynamic symbol table without a string table")
    str_off, str_size = sections[link][4], sections[link][5]
    if str_off > size or str_size > size - str_off:
        raise ElfError("has a malformed dynamic string table")
    strings = bytes(data[str_off : str_off + str_size])
    names = set()
    for k in range(sym_size // entsize):
        name_at, info, _, shndx, _, _ = _SYMBOL.unpack_from(data, sym_off + k * entsize)
        if shndx == 0 or info & 0xF != _STT_FUNC or info >> 4 not in (_STB_GLOBAL, _STB_WEAK):
            continue
        end = strings.find(b"\0", name_at)
        if name_at >= str_size or end < 0:
            raise ElfError("has a symbol name outside its string table")
        names.add(strings[name_at:end].decode("utf-8", "replace"))
    return machine, names
