"""Reading a `.tvmpack` (docs/tvmpack.md): check every byte before trusting any of it.

The file is memory-mapped. The tar headers are parsed here with bounds checks (each step
moves forward by at least one block, so a corrupted header cannot loop), the manifest is
checked field by field against its own hash, every member against its sha256, the weights
index against the weights member, and the bytecode by `verify_executable` (every index in
range, backward jumps only to loop heads, no recursion), as IREE verifies a module once at
load. Any problem is a PackError whose one-line message starts with the file's path.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import re
import stat
from dataclasses import dataclass, field

import numpy as np

from tcc.rt.elf import MACHINES, ElfError, exported_functions, triple_architecture
from tcc.rt.errors import PackError
from tcc.rt.format import (
    BUILTINS,
    BYTECODE_VERSION,
    DEVICE_KERNELS_FIELD,
    DEVICE_KINDS,
    KERNEL_DTYPES,
    KERNEL_ORIGINS_FIELD,
    MANIFEST,
    MANIFEST_HASH_FIELD,
    MAX_MANIFEST_BYTES,
    NO_REG,
    PACK_FORMAT,
    PACK_VERSION,
    SIGNATURE,
    SIGNATURE_BYTES,
    TAR_BLOCK,
    WEIGHT_ALIGN,
    ArgKind,
    DimMode,
    Executable,
    FormatError,
    FuncKind,
    Op,
    ShapeOp,
    decode,
)
from tcc.rt.tensor import DTYPES, numpy_dtype

_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
_MAX_REGS = 1 << 20


class _Bad(Exception):
    """A problem found while checking; read_pack prefixes the path and raises PackError."""


@dataclass
class PackContents:
    """A verified pack. `weights` are read-only views of the mapped file: call `close()`
    (or use `with`) once they are no longer needed."""

    path: str
    manifest: dict
    executable: Executable
    target: str
    signatures: dict[str, dict]
    kernel_symbols: list[str]
    object_code: bytes | None
    shared_object: bytes | None
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    signature: bytes | None = None  # manifest.sig, checked when a public key was given
    # device kind -> its kernels' launch specs by symbol, and its binaries by name
    device_kernels: dict[str, dict[str, dict]] = field(default_factory=dict)
    device_binaries: dict[str, dict[str, bytes]] = field(default_factory=dict)
    _mmap: mmap.mmap | None = None

    @property
    def kernel_origins(self) -> dict[str, list[str]]:
        """Kernel symbol -> the graph bindings (ONNX node outputs) that call it; empty for
        a pack written without them."""
        return self.executable.kernel_origins

    def close(self) -> None:
        self.weights = {}
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a caller still holds a weight view; the GC unmaps later
                pass
            self._mmap = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_pack(path, public_key=None) -> PackContents:
    """Open and verify a pack; raises PackError naming `path` and the problem. With
    `public_key` (the path of an Ed25519 public key in PEM), the pack must carry a valid
    signature by it (tcc.rt.signature), checked before anything else is read."""
    path = os.fspath(path)
    verify = None
    if public_key is not None:
        from tcc.rt.signature import load_public_key

        verify = load_public_key(public_key)
    try:
        # O_NONBLOCK: a FIFO must not block the open; only a regular file is read
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _Bad("cannot read: not a regular file")
            size = st.st_size
            if size < 3 * TAR_BLOCK:
                raise _Bad(f"{size} bytes is too small to be a tvmpack")
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise PackError(f"{path}: cannot read: {e.strerror or e}") from None
    except _Bad as e:
        raise PackError(f"{path}: {e}") from None
    try:
        return _read(path, mm, verify)
    except _Bad as e:
        try:
            mm.close()
        except BufferError:  # a half-built weight view still points in; the GC unmaps it
            pass
        raise PackError(f"{path}: {e}") from None


def check_pack_bytes(data: bytes, name: str = "<memory>") -> None:
    """Verify a pack held in memory, as tccrt_pack_open_memory does; raises PackError whose
    message starts with `name`."""
    try:
        contents = _read(name, bytes(data), None)
    except _Bad as e:
        raise PackError(f"{name}: {e}") from None
    contents._mmap = None  # bytes, not a mapping: nothing to unmap
    contents.close()


def _read(path: str, mm: mmap.mmap, verify) -> PackContents:
    members = tar_members(mm)
    if MANIFEST not in members:
        raise _Bad(f"no {MANIFEST} member; not a tvmpack (rebuild it with `tcc emit`)")
    off, size = members[MANIFEST]
    if size > MAX_MANIFEST_BYTES:
        raise _Bad(f"{MANIFEST} is {size} bytes, more than the {MAX_MANIFEST_BYTES} allowed")
    signature = check_signature(mm, members, verify)
    manifest = check_manifest(mm[off : off + size])
    listed = manifest["members"]
    present = set(members) - {MANIFEST, SIGNATURE}
    if present != set(listed):
        extra, missing = sorted(present - set(listed)), sorted(set(listed) - present)
        raise _Bad(f"members do not match the manifest (unlisted: {extra}, missing: {missing})")
    with memoryview(mm) as view:
        for name in sorted(listed):
            off, size = members[name]
            if size != listed[name]["size"]:
                raise _Bad(f"member {name} is {size} bytes but the manifest says {listed[name]['size']}")
            if hashlib.sha256(view[off : off + size]).hexdigest() != listed[name]["sha256"]:
                raise _Bad(f"member {name} is corrupted (sha256 mismatch)")

    def member(name):
        if name is None:
            return None
        if name not in members:
            raise _Bad(f"the manifest names member {name!r}, which the pack lacks")
        off, size = members[name]
        return off, size

    bc = member(manifest["bytecode"]["member"])
    try:
        exe = decode(mm[bc[0] : bc[0] + bc[1]])
    except FormatError as e:
        raise _Bad(f"{manifest['bytecode']['member']}: {e}") from None
    kinfo = manifest["kernels"]
    symbols = kinfo["symbols"]
    verify_executable(exe, set(symbols), set(manifest["weights"]["arrays"]),
                      manifest["entry_functions"])
    origins = manifest.get(KERNEL_ORIGINS_FIELD, {})
    stray = sorted(set(origins) - set(symbols))
    if stray:
        raise _Bad(f"{MANIFEST}: {KERNEL_ORIGINS_FIELD} names kernel {stray[0]!r}, which the "
                   "kernel table lacks")
    devices = manifest.get(DEVICE_KERNELS_FIELD, {})
    on_devices = {sym for lib in devices.values() for sym in lib["kernels"]}
    binaries = {}
    for kind, lib in devices.items():
        member(lib["source"])
        binaries[kind] = {}
        for name, where in lib["binaries"].items():
            off, size = member(where)
            binaries[kind][name] = mm[off : off + size]
    cpu_symbols = [s for s in symbols if s not in on_devices]
    so = member(kinfo["shared_object"])
    if so is not None:
        check_shared_object(mm[so[0] : so[0] + so[1]], kinfo["shared_object"], manifest["target"],
                            cpu_symbols)
    weights = _map_weights(mm, member(manifest["weights"]["member"]), manifest["weights"])
    exe.signatures = manifest["entry_functions"]
    exe.kernel_origins = origins
    obj = member(kinfo["object"])
    return PackContents(
        path=path,
        manifest=manifest,
        executable=exe,
        target=manifest["target"],
        signatures=manifest["entry_functions"],
        kernel_symbols=list(symbols),
        object_code=None if obj is None else mm[obj[0] : obj[0] + obj[1]],
        shared_object=None if so is None else mm[so[0] : so[0] + so[1]],
        weights=weights,
        signature=signature,
        device_kernels={kind: lib["kernels"] for kind, lib in devices.items()},
        device_binaries=binaries,
        _mmap=mm,
    )


# -- the signature ---------------------------------------------------------------------------------


def check_signature(mm, members: dict[str, tuple[int, int]], verify) -> bytes | None:
    """manifest.sig, which must be 64 bytes when present; with `verify`, it must be present
    and sign the manifest's bytes."""
    if SIGNATURE in members and members[SIGNATURE][1] != SIGNATURE_BYTES:
        raise _Bad(f"{SIGNATURE} is {members[SIGNATURE][1]} bytes, not the {SIGNATURE_BYTES} of an "
                   "Ed25519 signature")
    if SIGNATURE not in members:
        if verify is not None:
            raise _Bad(f"the pack is not signed (no {SIGNATURE}); sign it with `tcc compile --sign KEY`, "
                       "or run it without --require-signature")
        return None
    off, size = members[SIGNATURE]
    signature = mm[off : off + size]
    m_off, m_size = members[MANIFEST]
    if verify is not None and not verify(mm[m_off : m_off + m_size], signature):
        raise _Bad("the signature does not match the public key (the pack was changed after "
                   "signing, or signed with another key)")
    return signature


# -- the shared object ----------------------------------------------------------------------------

RUNTIME_FUNCTIONS = ("tcc_last_error", "tcc_set_num_threads")


def check_shared_object(data, member: str, target: str, symbols: list[str]) -> None:
    """The kernels' shared object, checked without loading it (tcc.rt.elf): an ELF shared
    object for the target's machine that defines the runtime functions and every kernel."""
    try:
        machine, functions = exported_functions(data)
    except ElfError as e:
        raise _Bad(f"{member} {e}; compile the pack again") from None
    arch = triple_architecture(target)
    if arch is not None and MACHINES.get(arch) != machine:
        raise _Bad(f"{member} is code for ELF machine {machine}, but the target names {arch}; "
                   "compile the pack again")
    if not all(f in functions for f in RUNTIME_FUNCTIONS):
        raise _Bad("the shared object has no tcc_last_error/tcc_set_num_threads; it was not built "
                   "by tcc's CPU backend")
    for symbol in symbols:
        if symbol not in functions:
            raise _Bad(f"the shared object lacks kernel '{symbol}' of the kernel table; compile the "
                       "pack again")


# -- tar ----------------------------------------------------------------------------------------


def tar_members(buf) -> dict[str, tuple[int, int]]:
    """Regular-file members of a POSIX tar as name -> (data offset, size), bounds-checked."""
    n = len(buf)
    out: dict[str, tuple[int, int]] = {}
    pos = 0
    while True:
        if pos + TAR_BLOCK > n:
            raise _Bad(f"truncated: tar header at byte {pos} runs past the end ({n} bytes)")
        hdr = bytes(buf[pos : pos + TAR_BLOCK])
        if hdr == b"\0" * TAR_BLOCK:
            if n - pos != 2 * TAR_BLOCK or bytes(buf[pos:]) != b"\0" * (2 * TAR_BLOCK):
                raise _Bad(f"truncated or padded: the archive must end with two zero blocks "
                           f"at byte {pos} (file is {n} bytes)")
            break
        stored = _octal(hdr[148:156], pos, "checksum")
        if stored != sum(hdr[:148]) + 8 * 32 + sum(hdr[156:]):
            raise _Bad(f"tar header at byte {pos} is corrupted (checksum mismatch)")
        if hdr[257:263] != b"ustar\0":
            raise _Bad(f"tar header at byte {pos} is not POSIX ustar")
        if hdr[156:157] not in (b"0", b"\0"):
            raise _Bad(f"tar header at byte {pos} is not a regular file (type {hdr[156:157]!r})")
        try:
            name = hdr[0:100].split(b"\0")[0].decode("utf-8")
            prefix = hdr[345:500].split(b"\0")[0].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"tar header at byte {pos} has a name that is not UTF-8") from None
        name = f"{prefix}/{name}" if prefix else name
        size = _octal(hdr[124:136], pos, "size")
        data = pos + TAR_BLOCK
        if data + size > n:
            raise _Bad(f"truncated: member {name} needs {size} bytes at byte {data}, file has {n}")
        if name in out:
            raise _Bad(f"member {name} appears twice")
        out[name] = (data, size)
        pos = data + -(-size // TAR_BLOCK) * TAR_BLOCK
    return out


def _octal(field_: bytes, pos: int, what: str) -> int:
    text = field_.rstrip(b"\0 ").lstrip(b" ")
    if not text or any(c not in b"01234567" for c in text):
        raise _Bad(f"tar header at byte {pos} has a malformed {what} field")
    return int(text, 8)


# -- manifest -----------------------------------------------------------------------------------


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _Bad(f"{MANIFEST} repeats a key")
    return dict(pairs)


def _reject_constant(name):
    raise _Bad(f"{MANIFEST} holds {name}, which is not JSON")


def check_manifest(raw: bytes) -> dict:
    """Parse and type-check manifest.json, including its own hash."""
    try:
        m = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                       parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Bad(f"{MANIFEST} is not valid JSON") from None
    _expect(m, dict, "the manifest")
    known = {"format", "format_version", MANIFEST_HASH_FIELD, "target", "bytecode", "kernels",
             "weights", "entry_functions", "members"}
    optional = {KERNEL_ORIGINS_FIELD, DEVICE_KERNELS_FIELD}
    missing, unknown = sorted(known - set(m)), sorted(set(m) - known - optional)
    if missing or unknown:
        raise _Bad(f"{MANIFEST} fields are wrong (missing: {missing}, unknown: {unknown})")
    if m["format"] != PACK_FORMAT:
        raise _Bad(f"format is {m['format']!r}, not {PACK_FORMAT!r}")
    if m["format_version"] != PACK_VERSION or type(m["format_version"]) is not int:
        raise _Bad(f"format version {m['format_version']!r} is not supported (this runtime reads "
                   f"version {PACK_VERSION}); rebuild the pack with this tcc")
    digest = m[MANIFEST_HASH_FIELD]
    if not isinstance(digest, str) or not _SHA_RE.match(digest) or raw.count(digest.encode()) != 1:
        raise _Bad(f"{MANIFEST} has a malformed {MANIFEST_HASH_FIELD}")
    if hashlib.sha256(raw.replace(digest.encode(), b"0" * 64)).hexdigest() != digest:
        raise _Bad(f"{MANIFEST} is corrupted (sha256 mismatch)")
    _expect(m["target"], str, "target")
    bc = _fields(m["bytecode"], {"member": str, "version": int}, "bytecode")
    if bc["version"] != BYTECODE_VERSION:
        raise _Bad(f"bytecode version {bc['version']} is not supported (this runtime reads "
                   f"{BYTECODE_VERSION}); rebuild the pack with this tcc")
    k = _fields(m["kernels"], {"object": (str, type(None)), "shared_object": (str, type(None)),
                               "symbols": list}, "kernels")
    for s in k["symbols"]:
        _expect(s, str, "a kernel symbol")
    _check_origins(m.get(KERNEL_ORIGINS_FIELD, {}))
    _check_device_kernels(m.get(DEVICE_KERNELS_FIELD, {}), k["symbols"])
    w = _fields(m["weights"], {"member": (str, type(None)), "alignment": int, "arrays": dict}, "weights")
    if w["alignment"] != WEIGHT_ALIGN:
        raise _Bad(f"weights alignment is {w['alignment']}, expected {WEIGHT_ALIGN}")
    for name, a in w["arrays"].items():
        a = _fields(a, {"dtype": str, "shape": list, "offset": int, "nbytes": int}, f"weight {name!r}")
        if a["dtype"] not in DTYPES or not all(type(d) is int and d >= 0 for d in a["shape"]):
            raise _Bad(f"weight {name!r} has a malformed dtype or shape")
    _expect(m["entry_functions"], dict, "entry_functions")
    for fname, sig in m["entry_functions"].items():
        sig = _fields(sig, {"inputs": list, "outputs": list}, f"signature of {fname!r}")
        for t in sig["inputs"] + sig["outputs"]:
            t = _fields(t, {"name": str, "dtype": str, "shape": list}, f"a tensor of {fname!r}")
            if t["dtype"] not in DTYPES or not all(
                    (type(d) is int and d >= 0) or isinstance(d, str) for d in t["shape"]):
                raise _Bad(f"a tensor of {fname!r} has a malformed dtype or shape")
    _expect(m["members"], dict, "members")
    for name, info in m["members"].items():
        info = _fields(info, {"size": int, "sha256": str}, f"member {name!r}")
        if not _SHA_RE.match(info["sha256"]) or info["size"] < 0:
            raise _Bad(f"member {name!r} has a malformed size or sha256")
    return m


def _check_origins(origins) -> None:
    """The optional kernel_origins: symbol -> binding names (symbols are checked against the
    kernel table after the bytecode, whose errors say more)."""
    _expect(origins, dict, KERNEL_ORIGINS_FIELD)
    for sym, names in origins.items():
        _expect(names, list, f"{KERNEL_ORIGINS_FIELD} of {sym!r}")
        for name in names:
            _expect(name, str, f"an origin of {sym!r}")


_BINARY_NAME = re.compile(r"(sm|compute)_[1-9][0-9]{1,2}\Z")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
MAX_THREADS_PER_BLOCK = 1024


def _check_device_kernels(libraries, symbols: list) -> None:
    """The optional device_kernels: per device kind its target, binaries, source and each
    kernel's launch spec (docs/tvmpack.md), every program verified as the bytecode's are."""
    _expect(libraries, dict, DEVICE_KERNELS_FIELD)
    table = set(symbols)
    for kind, lib in libraries.items():
        what = f"{DEVICE_KERNELS_FIELD}.{kind}"
        if kind not in DEVICE_KINDS:
            raise _Bad(f"{MANIFEST}: {what}: this runtime runs no kernels for device {kind!r} "
                       f"(it knows {', '.join(DEVICE_KINDS)}); use a newer tcc")
        lib = _fields(lib, {"target": str, "binaries": dict, "source": str, "kernels": dict}, what)
        if not lib["binaries"]:
            raise _Bad(f"{MANIFEST}: {what} has no binaries")
        for name, member in lib["binaries"].items():
            if not _BINARY_NAME.match(name):
                raise _Bad(f"{MANIFEST}: {what} has a binary named {name!r}; expected sm_XX or compute_XX")
            _expect(member, str, f"{what}.binaries.{name}")
        for sym, spec in lib["kernels"].items():
            if sym not in table:
                raise _Bad(f"{MANIFEST}: {what} has kernel {sym!r}, which the kernel table lacks")
            _check_launch_spec(spec, f"{what} kernel {sym!r}")


def _check_launch_spec(spec, where: str) -> None:
    spec = _fields(spec, {"params": list, "size_vars": list, "bind": list, "writes": list,
                          "preconditions": list, "workspaces": list, "launches": list}, where)
    names = spec["size_vars"]
    for n in names:
        _expect(n, str, f"{where}: a size variable")
    ranks = []
    for i, p in enumerate(spec["params"]):
        scalar = isinstance(p, dict) and "scalar" in p
        p = _fields(p, {"dtype": str, "scalar": bool} if scalar else {"dtype": str, "shape": list},
                    f"{where} parameter {i}")
        if p["dtype"] not in KERNEL_DTYPES or (scalar and p["scalar"] is not True):
            raise _Bad(f"{MANIFEST}: {where} parameter {i} has a malformed dtype")
        if not scalar:
            _launch_program(p["shape"], len(names), f"{where} parameter {i}")
        ranks.append(None if scalar else p["shape"][0])
    if len(spec["bind"]) != len(names):
        raise _Bad(f"{MANIFEST}: {where} binds {len(spec['bind'])} of {len(names)} size variables")
    for b in spec["bind"]:
        if (not isinstance(b, list) or len(b) != 2 or not all(type(x) is int for x in b)
                or not 0 <= b[0] < len(ranks)
                or not (b[1] == -1 if ranks[b[0]] is None else 0 <= b[1] < ranks[b[0]])):
            raise _Bad(f"{MANIFEST}: {where} reads a size variable from a bad place {_shown(b)}")
    for i in spec["writes"]:
        if type(i) is not int or not 0 <= i < len(ranks) or ranks[i] is None:
            raise _Bad(f"{MANIFEST}: {where} writes a bad parameter {_shown(i)}")
    _launch_program(spec["preconditions"], len(names), f"{where} preconditions")
    for w in spec["workspaces"]:
        w = _fields(w, {"name": str, "dtype": str, "count": list}, f"{where} workspace")
        if w["dtype"] not in KERNEL_DTYPES:
            raise _Bad(f"{MANIFEST}: {where} workspace {w['name']!r} has a malformed dtype")
        _launch_program(w["count"], len(names), f"{where} workspace {w['name']!r}", ndim=1)
    if not spec["launches"]:
        raise _Bad(f"{MANIFEST}: {where} has no launches")
    for launch in spec["launches"]:
        launch = _fields(launch, {"function": str, "grid": list, "block": list}, f"{where} launch")
        if not _C_IDENTIFIER.match(launch["function"]):
            raise _Bad(f"{MANIFEST}: {where} launches a function with a malformed name")
        _launch_program(launch["grid"], len(names), f"{where} grid", ndim=3)
        block = launch["block"]
        if (len(block) != 3 or not all(type(b) is int and b >= 1 for b in block)
                or block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK):
            raise _Bad(f"{MANIFEST}: {where} has a malformed block {_shown(block)}")


def _shown(v) -> str:
    """An int or a list of ints as Python shows it, anything else by its type: what the C
    runtime's reader can say alike."""
    if type(v) is int or (isinstance(v, list) and all(type(x) is int for x in v)):
        return repr(v)
    return f"(a {type(v).__name__})"


def _launch_program(prog, slots: int, where: str, ndim: int | None = None) -> None:
    if not all(type(w) is int for w in prog):
        raise _Bad(f"{MANIFEST}: {where}: malformed shape program")
    try:
        _verify_shape_program(prog, slots, where, ndim)
    except _Bad as e:
        raise _Bad(f"{MANIFEST}: {e}") from None


def _expect(v, types, what: str) -> None:
    if not isinstance(v, types) or (isinstance(v, bool) and types is int):
        raise _Bad(f"{MANIFEST}: {what} has the wrong type ({type(v).__name__})")


def _fields(d, spec: dict, what: str) -> dict:
    _expect(d, dict, what)
    if set(d) != set(spec):
        raise _Bad(f"{MANIFEST}: {what} must have exactly the fields {sorted(spec)}")
    for k, t in spec.items():
        _expect(d[k], t, f"{what}.{k}")
    return d


# -- weights ------------------------------------------------------------------------------------


def _map_weights(mm, where, info: dict) -> dict[str, np.ndarray]:
    arrays = info["arrays"]
    if where is None:
        if arrays:
            raise _Bad("the manifest lists weights but names no weights member")
        return {}
    base, size = where
    out = {}
    for name in sorted(arrays):
        a = arrays[name]
        dt = numpy_dtype(a["dtype"]).newbyteorder("<")
        count = math.prod(a["shape"])
        off, nbytes = a["offset"], a["nbytes"]
        if nbytes != count * dt.itemsize:
            raise _Bad(f"weight {name!r}: {nbytes} bytes do not hold shape {a['shape']} of {a['dtype']}")
        if off < 0 or off % WEIGHT_ALIGN or off + nbytes > size:
            raise _Bad(f"weight {name!r}: offset {off} (+{nbytes}) is misaligned or out of bounds")
        arr = np.frombuffer(mm, dtype=dt, count=count, offset=base + off).reshape(a["shape"])
        out[name] = arr
    return out


# -- bytecode verification ----------------------------------------------------------------------


def verify_executable(exe: Executable, symbols: set[str], weights: set[str], entries: dict) -> None:
    """Check every index, argument and jump of `exe`; raises _Bad (PackError via read_pack)."""
    names = [f.name for f in exe.functions]
    if len(set(names)) != len(names):
        raise _Bad("bytecode defines a function twice")
    by_name = {f.name: f for f in exe.functions}
    for kind, name in exe.table:
        if kind == FuncKind.KERNEL and name not in symbols:
            raise _Bad(f"bytecode calls kernel {name!r}, which the kernel table lacks")
        if kind == FuncKind.BUILTIN and name not in BUILTINS:
            raise _Bad(f"bytecode calls unknown builtin {name!r}")
        if kind == FuncKind.VM and name not in by_name:
            raise _Bad(f"bytecode calls function {name!r}, which it does not define")
    for name, sig in entries.items():
        if name not in by_name or by_name[name].num_params != len(sig["inputs"]):
            raise _Bad(f"entry function {name!r} is missing from the bytecode or takes other inputs")
    calls: dict[str, set[str]] = {}
    for f in exe.functions:
        calls[f.name] = _verify_function(exe, f, weights)
    _check_acyclic(calls)


def _verify_function(exe: Executable, f, weights: set[str]) -> set[str]:
    where = f"bytecode function {f.name!r}"
    if not 0 <= f.num_params <= f.num_regs <= _MAX_REGS:
        raise _Bad(f"{where}: {f.num_params} params and {f.num_regs} registers are out of range")
    n = len(f.code)
    if n == 0 or f.code[-1].op != Op.RET:
        raise _Bad(f"{where} does not end with ret")
    callees: set[str] = set()

    def reg(r, pc, allow_none=False):
        if not (0 <= r < f.num_regs or (allow_none and r == NO_REG)):
            raise _Bad(f"{where} at {pc}: register {r} is out of range")

    for pc, ins in enumerate(f.code):
        if ins.op == Op.RET:
            reg(ins.a, pc)
        elif ins.op in (Op.GOTO, Op.IF):
            off = ins.a if ins.op == Op.GOTO else ins.b
            if ins.op == Op.IF:
                reg(ins.a, pc)
            if ins.op == Op.GOTO and off < 0 and pc + off >= 0:
                _verify_back_edge(f, pc, pc + off, where)
            elif not (0 < off and pc + off < n):
                raise _Bad(f"{where} at {pc}: jump offset {off} leaves the function or goes back")
        else:
            if not 0 <= ins.a < len(exe.table):
                raise _Bad(f"{where} at {pc}: function index {ins.a} is out of range")
            reg(ins.b, pc, allow_none=True)
            for kind, value in ins.args:
                if kind == ArgKind.REG:
                    reg(value, pc)
                elif kind == ArgKind.CONST:
                    if not 0 <= value < len(exe.constants):
                        raise _Bad(f"{where} at {pc}: constant {value} is out of range")
                elif kind != ArgKind.IMM:
                    raise _Bad(f"{where} at {pc}: unknown argument kind {kind}")
            kind, name = exe.table[ins.a]
            if kind == FuncKind.BUILTIN:
                _verify_builtin(exe, f, name, ins, weights, f"{where} at {pc}")
            else:
                if any(k != ArgKind.REG for k, _ in ins.args):
                    raise _Bad(f"{where} at {pc}: {name!r} takes registers only")
                if kind == FuncKind.VM:
                    callees.add(name)
                    callee = exe.function(name)
                    if len(ins.args) != callee.num_params:
                        raise _Bad(f"{where} at {pc}: {name!r} takes {callee.num_params} arguments")
    _verify_written_before_read(f, where)
    return callees


# The register sets _verify_written_before_read keeps (one bit per register, for each jump
# target and each `if`) may hold at most this many bits in all: about 128 MiB.
MAX_DATAFLOW_BITS = 1 << 30


def _verify_written_before_read(f, where: str) -> None:
    """Every register an instruction reads is written first on every path from the entry
    (parameters are written on entry). One pass in code order: the set of registers written
    on every path so far; a forward jump target gets the intersection over the paths that
    reach it. A backward goto returns to a loop head and must bring back every register the
    head had, so the loop adds nothing the head did not; unreachable code is not checked.
    Runs after the indices are checked; the C verifier (runtime_c/src/verify.c) is the same."""
    regs = f.num_regs
    pending: dict[int, int] = {}  # jump target -> registers written on every path so far
    heads: dict[int, int] = {}  # pc of an `if` -> the registers written when it runs
    written, reachable = (1 << f.num_params) - 1, True

    def keep(table: dict[int, int], pc: int, bits: int) -> None:
        if pc not in table and (len(pending) + len(heads) + 1) * regs > MAX_DATAFLOW_BITS:
            raise _Bad(f"{where}: too many branches for its {regs} registers to verify")
        table[pc] = table[pc] & bits if pc in table else bits

    def read(pc: int, r: int) -> None:
        if not written >> r & 1:
            raise _Bad(f"{where} at {pc}: reads register {r} before anything writes it")

    for pc, ins in enumerate(f.code):
        if pc in pending:
            joined = pending.pop(pc)
            written = written & joined if reachable else joined
            reachable = True
        if not reachable:
            continue
        if ins.op == Op.RET:
            read(pc, ins.a)
            reachable = False
        elif ins.op == Op.IF:
            read(pc, ins.a)
            keep(heads, pc, written)
            keep(pending, pc + ins.b, written)
        elif ins.op == Op.GOTO:
            if ins.a > 0:
                keep(pending, pc + ins.a, written)
            else:
                lost = heads.get(pc + ins.a, 0) & ~written
                if lost:
                    r = (lost & -lost).bit_length() - 1
                    raise _Bad(f"{where} at {pc}: the loop back to {pc + ins.a} can arrive without "
                               f"register {r} written")
            reachable = False
        else:
            for kind, value in ins.args:
                if kind == ArgKind.REG:
                    read(pc, value)
            if ins.b != NO_REG:
                written |= 1 << ins.b


def _verify_back_edge(f, pc: int, head: int, where: str) -> None:
    """A backward `goto` closes a loop: it must land on the loop's head, an `if` whose false
    target is the instruction right after this `goto`. Every cycle of the code then passes
    through a head that decides whether to go round again, so only a loop condition (data,
    as in the model) can keep a run going; there is no loop that nothing tests."""
    ins = f.code[head]
    if ins.op != Op.IF or head + ins.b != pc + 1:
        raise _Bad(f"{where} at {pc}: jump offset {head - pc} goes back to {head}, which is not "
                   "a loop head (an if whose false target is just after the jump)")


def _verify_builtin(exe, f, name, ins, weights, where) -> None:
    spec, _ = BUILTINS[name]
    args = ins.args
    kinds = {"r": ArgKind.REG, "i": ArgKind.IMM, "s": ArgKind.CONST, "n": ArgKind.CONST}
    if spec == "*":
        spec = "r" * len(args)
    if len(args) != len(spec):
        raise _Bad(f"{where}: builtin {name} takes {len(spec)} arguments, got {len(args)}")
    consts = []
    for (kind, value), want in zip(args, spec):
        if kind != kinds[want]:
            raise _Bad(f"{where}: builtin {name} has an argument of the wrong kind")
        if want in "sn":
            c = exe.constants[value]
            if isinstance(c, str) != (want == "s"):
                raise _Bad(f"{where}: builtin {name} has a constant of the wrong kind")
            consts.append(c)
    if name in ("make_shape", "make_sizes"):
        _verify_shape_program(consts[0], len(f.heap_names), where)
    elif name == "alloc_arena":
        _verify_shape_program(consts[0], len(f.heap_names), where)
        _verify_lifetimes(consts[1], consts[0][0], len(f.code), where)
    elif name == "arena_view" and args[1][1] < 0:
        raise _Bad(f"{where}: arena tensor index {args[1][1]} is negative")
    elif name == "match_shape":
        _verify_pattern(exe, consts[2], len(f.heap_names), where)
    elif name == "match_dims":
        _verify_pattern(exe, consts[1], len(f.heap_names), where)
    elif name == "assert_shape":
        _verify_shape_program(consts[0], len(f.heap_names), where)
    if name in _DTYPE_ARG and consts[_DTYPE_ARG[name]] not in DTYPES:
        raise _Bad(f"{where}: unknown dtype")
    if name == "scalar" and consts[0] not in _SCALAR_DTYPES:
        raise _Bad(f"{where}: builtin scalar makes bool or integer tensors, not {consts[0]}")
    if name == "load_constant" and consts[0] not in weights:
        raise _Bad(f"{where}: weight {consts[0]!r} is not in the pack")


# Builtins with a dtype argument: which of their constant arguments it is.
_DTYPE_ARG = {"match_shape": 1, "alloc_tensor": 0, "scalar": 0, "stack_finish": 0, "arena_view": 0}
_SCALAR_DTYPES = frozenset("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64".split())


def _verify_shape_program(prog, heap_size: int, where: str, ndim: int | None = None) -> None:
    if not prog or prog[0] < 0 or (ndim is not None and prog[0] != ndim):
        raise _Bad(f"{where}: malformed shape program")
    i = 1
    for _ in range(prog[0]):
        if i >= len(prog) or prog[i] < 0 or i + 1 + prog[i] > len(prog):
            raise _Bad(f"{where}: shape program runs past its end")
        words, i = prog[i + 1 : i + 1 + prog[i]], i + 1 + prog[i]
        depth, j = 0, 0
        while j < len(words):
            op = words[j]
            if op in (ShapeOp.PUSH_INT, ShapeOp.PUSH_VAR):
                if j + 1 >= len(words) or (op == ShapeOp.PUSH_VAR and not 0 <= words[j + 1] < heap_size):
                    raise _Bad(f"{where}: shape program pushes a bad operand")
                depth, j = depth + 1, j + 2
            elif ShapeOp.ADD <= op <= ShapeOp.LE and depth >= 2:
                depth, j = depth - 1, j + 1
            elif op == ShapeOp.SELECT and depth >= 3:
                depth, j = depth - 2, j + 1
            else:
                raise _Bad(f"{where}: shape program has a bad token {op}")
        if depth != 1:
            raise _Bad(f"{where}: shape program leaves {depth} values")
    if i != len(prog):
        raise _Bad(f"{where}: shape program has trailing words")


def _verify_lifetimes(lifetimes, count: int, code_length: int, where: str) -> None:
    """An arena's lifetimes: [start, end] per tensor, instruction indices of the function."""
    if len(lifetimes) != 2 * count:
        raise _Bad(f"{where}: arena lifetimes have {len(lifetimes)} words for {count} tensors")
    for k in range(count):
        start, end = lifetimes[2 * k], lifetimes[2 * k + 1]
        if start > end:
            raise _Bad(f"{where}: arena tensor {k} has lifetime [{start}, {end}], which ends "
                       "before it starts")
        if start < 0 or end >= code_length:
            raise _Bad(f"{where}: arena tensor {k} has lifetime [{start}, {end}], outside the "
                       f"function's {code_length} instructions")


def _verify_pattern(exe, pattern, heap_size: int, where: str) -> None:
    if not pattern or pattern[0] < 0 or len(pattern) != 1 + 2 * pattern[0]:
        raise _Bad(f"{where}: malformed match_shape pattern")
    for mode, value in zip(pattern[1::2], pattern[2::2]):
        if mode in (DimMode.BIND, DimMode.CHECK) and not 0 <= value < heap_size:
            raise _Bad(f"{where}: match_shape slot {value} is out of range")
        elif mode == DimMode.EXPR:
            if not 0 <= value < len(exe.constants) or isinstance(exe.constants[value], str):
                raise _Bad(f"{where}: match_shape expression {value} is out of range")
            _verify_shape_program(exe.constants[value], heap_size, where, ndim=1)
        elif mode not in DimMode._value2member_map_:
            raise _Bad(f"{where}: unknown match_shape mode {mode}")


def _check_acyclic(calls: dict[str, set[str]]) -> None:
    """No VM function may reach itself: with backward jumps only onto loop heads, a run
    then ends unless a loop's condition keeps it going."""
    state: dict[str, int] = {}
    for root in sorted(calls):
        stack = [(root, iter(sorted(calls[root])))]
        if state.get(root) == 2:
            continue
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise _Bad(f"bytecode function {nxt!r} calls itself (directly or not)")
            elif state.get(nxt) is None:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(calls[nxt]))))
