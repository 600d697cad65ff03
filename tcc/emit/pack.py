"""Writing a `.tvmpack` (docs/tvmpack.md): an uncompressed POSIX tar a standard `tar` reads.

Everything that could vary between two builds of the same model is fixed: weights.bin comes
first and the other members follow sorted by name, every header has mtime 0, uid/gid 0, no
owner names and mode 0644, the manifest is JSON with sorted keys, and weights are laid out
in name order. So the same inputs give the same bytes. Tar puts member data at 512-byte
boundaries, so 64-byte aligned offsets inside weights.bin are 64-byte aligned in the file,
and the loader maps them. The weights lead because they are known before the kernels are
compiled and are most of the file: a compile writes them (`PackFile`) while its kernels
compile.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tcc.errors import TccError
from tcc.outfile import write_output
from tcc.rt.format import (
    BYTECODE,
    BYTECODE_VERSION,
    DEVICE_KERNELS_FIELD,
    KERNEL_ORIGINS_FIELD,
    KERNELS_DIR,
    MANIFEST,
    MANIFEST_HASH_FIELD,
    OBJECT_SUFFIX,
    PACK_FORMAT,
    PACK_VERSION,
    SHARED_SUFFIX,
    SIGNATURE,
    SIGNATURE_BYTES,
    TAR_BLOCK,
    WEIGHT_ALIGN,
    WEIGHTS,
    Executable,
    FuncKind,
    Op,
)


class PackWriteError(TccError):
    """The inputs to the pack writer do not fit together (a missing weight or kernel)."""


@dataclass(frozen=True)
class DeviceKernels:
    """One device's kernel library: the target it was compiled for, its binaries by name
    (`sm_90`: a cubin, `compute_90`: PTX), the source they came from, and each kernel's
    launch spec (tcc.emit.cuda.launch_spec)."""

    target: str
    binaries: Mapping[str, bytes]
    source: str
    kernels: Mapping[str, dict]


@dataclass(frozen=True)
class WeightsMember:
    """The weights member as a pack holds it: its buffers (views of the arrays, and the
    zero padding between them), the manifest's index of the arrays, and its sha256. Made
    apart from the pack (`weights_member`) so that a compile can digest and write the
    weights while its kernels compile. `tar_parts` are the pack's first buffers, header
    and padding included, whatever else it holds (none when there are no weights)."""

    pieces: list
    index: dict
    sha256: str
    tar_parts: list


def weights_member(weights: Mapping[str, np.ndarray]) -> WeightsMember:
    pieces, index = _weights_pieces(weights)
    return WeightsMember(pieces, index, _sha256(pieces),
                         _member_parts(WEIGHTS, pieces) if index else [])


def pack_bytes(*args, **kwargs) -> bytes:
    """The pack's bytes in one buffer (`pack_parts` joined); see pack_parts."""
    return b"".join(pack_parts(*args, **kwargs))


def pack_parts(
    executable: Executable,
    kernels=None,
    target: str = "llvm",
    weights: Mapping[str, np.ndarray] | WeightsMember | None = None,
    signatures: Mapping[str, dict] | None = None,
    kernel_origins: Mapping[str, list[str]] | None = None,
    sign: Callable[[bytes], bytes] | None = None,
    device_kernels: Mapping[str, DeviceKernels] | None = None,
) -> list:
    """The pack's bytes, as the buffers that written one after the other make it: the
    weights lie in their arrays, not copied (ResNet-50's 100 MB). `kernels` has
    `.object_code`, `.shared_object` (or None) and `.symbols` (a CpuModule), or is None for
    a program without CPU kernels;
    `device_kernels` holds the kernels of other devices by kind (`cuda`); `signatures` and
    `kernel_origins` (symbol -> the bindings that call it) default to the executable's own.
    `sign` (tcc.emit.signing.load_signing_key) adds the manifest's signature. `weights` may
    be given as `weights_member` made them."""
    stored = weights if isinstance(weights, WeightsMember) else weights_member(weights or {})
    signatures = dict(signatures if signatures is not None else executable.signatures)
    origins = kernel_origins if kernel_origins is not None else executable.kernel_origins
    devices = dict(device_kernels or {})
    symbols = sorted(kernels.symbols) if kernels is not None else []
    for kind in sorted(devices):
        clash = sorted(set(symbols) & set(devices[kind].kernels))
        if clash:
            raise PackWriteError(f"kernel {clash[0]!r} is in two kernel libraries; compile each "
                                 "kernel for one device")
        symbols = sorted([*symbols, *devices[kind].kernels])
    _check_references(executable, symbols, stored.index, signatures)
    origins = _checked_origins(origins, symbols)

    members: dict[str, bytes | list] = {BYTECODE: executable.encode()}
    kind = re.sub(r"[^A-Za-z0-9_.-]", "_", target.split()[0] if target.split() else "cpu")
    obj = so = None
    if kernels is not None and kernels.object_code is not None:
        obj = f"{KERNELS_DIR}{kind}{OBJECT_SUFFIX}"
        members[obj] = bytes(kernels.object_code)
    if kernels is not None and getattr(kernels, "shared_object", None) is not None:
        so = f"{KERNELS_DIR}{kind}{SHARED_SUFFIX}"
        members[so] = bytes(kernels.shared_object)
    listed_devices = {kind: _device_members(kind, devices[kind], members) for kind in sorted(devices)}
    index = stored.index
    digests = {}
    if index:
        members[WEIGHTS] = stored.pieces
        digests[WEIGHTS] = stored.sha256

    manifest = {
        "format": PACK_FORMAT,
        "format_version": PACK_VERSION,
        MANIFEST_HASH_FIELD: "0" * 64,
        "target": target,
        "bytecode": {"member": BYTECODE, "version": BYTECODE_VERSION},
        "kernels": {"object": obj, "shared_object": so, "symbols": symbols},
        "weights": {"member": WEIGHTS if index else None, "alignment": WEIGHT_ALIGN, "arrays": index},
        "entry_functions": signatures,
        "members": {n: {"size": _size(d), "sha256": digests.get(n) or _sha256(d)}
                    for n, d in sorted(members.items())},
    }
    if origins:  # optional: a pack without it reads the same, with unnamed kernels
        manifest[KERNEL_ORIGINS_FIELD] = origins
    if listed_devices:  # optional: CPU packs stay as they were
        manifest[DEVICE_KERNELS_FIELD] = listed_devices
    text = json.dumps(manifest, sort_keys=True, indent=1).encode("utf-8") + b"\n"
    digest = hashlib.sha256(text).hexdigest()
    members[MANIFEST] = text.replace(b'"' + b"0" * 64 + b'"', f'"{digest}"'.encode(), 1)
    if sign is not None:
        members[SIGNATURE] = sign(members[MANIFEST])
        if len(members[SIGNATURE]) != SIGNATURE_BYTES:
            raise PackWriteError(f"the signer gave {len(members[SIGNATURE])} bytes, not an Ed25519 signature")
    return _tar_parts(members, stored)


def _pieces(member) -> list:
    return member if isinstance(member, list) else [member]


def _size(member) -> int:
    return sum(memoryview(p).nbytes for p in _pieces(member))


def _sha256(member) -> str:
    h = hashlib.sha256()
    for piece in _pieces(member):
        h.update(piece)
    return h.hexdigest()


def _device_members(kind: str, library: DeviceKernels, members: dict[str, bytes]) -> dict:
    """Add a device library's binaries and source to `members`; its manifest entry."""
    if not library.binaries:
        raise PackWriteError(f"the {kind} kernel library has no binaries")
    binaries = {}
    for name in sorted(library.binaries):
        suffix = ".ptx" if name.startswith("compute_") else ".cubin"
        member = f"{KERNELS_DIR}{kind}.{name}{suffix}"
        members[member] = bytes(library.binaries[name])
        binaries[name] = member
    source = f"{KERNELS_DIR}{kind}.cu"
    members[source] = library.source.encode("utf-8")
    return {"target": library.target, "binaries": binaries, "source": source,
            "kernels": {sym: library.kernels[sym] for sym in sorted(library.kernels)}}


def write_pack(path, executable: Executable, kernels=None, target: str = "llvm",
               weights: Mapping[str, np.ndarray] | None = None,
               signatures: Mapping[str, dict] | None = None,
               kernel_origins: Mapping[str, list[str]] | None = None) -> None:
    """Write the pack to `path` atomically (a temp file in the same folder, then rename)."""
    write_file_atomic(path, pack_bytes(executable, kernels, target, weights, signatures, kernel_origins))


class PackFile:
    """A pack written as its buffers become known, whole or not at all: `write` them in
    order (a compile writes the weights' `tar_parts` while its kernels compile, then the
    rest), then `commit`, or `discard`. Without a `path` it only digests.
    `sha256` (with `digest`) is the digest of everything written, for the pack cache."""

    CHUNK = 1 << 20  # each piece is written and digested by this many bytes: one pass

    def __init__(self, path=None, digest: bool = False):
        from tcc.outfile import Staged

        self._staged = None if path is None else Staged(path, error=PackWriteError)
        self._hash = hashlib.sha256() if digest else None

    def write(self, parts) -> None:
        for part in parts:
            view = memoryview(part).cast("B")
            for at in range(0, len(view), self.CHUNK):
                chunk = view[at:at + self.CHUNK]
                if self._staged is not None:
                    self._staged.write(chunk)
                if self._hash is not None:
                    self._hash.update(chunk)

    @property
    def sha256(self) -> str | None:
        return None if self._hash is None else self._hash.hexdigest()

    def commit(self) -> None:
        if self._staged is not None:
            self._staged.commit()

    def discard(self) -> None:
        if self._staged is not None:
            self._staged.discard()


def write_file_atomic(path, data) -> None:
    """Write `data` (bytes, or the buffers of `pack_parts`) to `path` whole or not at all
    (tcc/outfile.py); a destination that cannot be written is a PackWriteError."""
    write_output(path, data, error=PackWriteError)


def _check_references(exe: Executable, symbols, weights, signatures) -> None:
    kernels = sorted({n for k, n in exe.table if k == FuncKind.KERNEL} - set(symbols))
    if kernels:
        raise PackWriteError(f"the bytecode calls kernels the kernel library lacks: {', '.join(kernels)}; "
                             "compile every PrimFunc the module calls")
    load = (FuncKind.BUILTIN, "load_constant")
    loaded = {exe.constants[v] for f in exe.functions for ins in f.code
              if ins.op == Op.CALL and exe.table[ins.a] == load for _, v in ins.args}
    missing = sorted(loaded - set(weights))
    if missing:
        raise PackWriteError(f"the bytecode loads weights that were not given: {', '.join(missing)}")
    for name in signatures:
        if not any(f.name == name for f in exe.functions):
            raise PackWriteError(f"signature for {name!r}, which the bytecode does not define")


def _checked_origins(origins: Mapping[str, list[str]], symbols: list[str]) -> dict[str, list[str]]:
    unknown = sorted(set(origins) - set(symbols))
    if unknown:
        raise PackWriteError(f"kernel origins name kernels the kernel library lacks: "
                             f"{', '.join(unknown)}; pass the origins of the compiled kernels only")
    out = {}
    for sym in sorted(origins):
        names = list(origins[sym])
        if not all(isinstance(n, str) for n in names):
            raise PackWriteError(f"kernel origins of {sym!r} must be strings (binding names)")
        out[sym] = names
    return out


def _weights_pieces(weights: Mapping[str, np.ndarray]) -> tuple[list, dict]:
    """The weights laid out one after the other, each at a multiple of WEIGHT_ALIGN (zero
    bytes between), as views of their arrays and the padding; and their index."""
    index, pieces, size = {}, [], 0
    for name in sorted(weights):
        a = np.asarray(weights[name])
        if a.dtype.kind in "OUSV":
            raise PackWriteError(f"a weight of dtype {a.dtype} cannot be stored in a pack")
        a = a.astype(a.dtype.newbyteorder("<"), order="C", copy=False)  # keeps a 0-d shape
        if size % WEIGHT_ALIGN:
            pieces.append(bytes(-size % WEIGHT_ALIGN))
            size += -size % WEIGHT_ALIGN
        index[name] = {"dtype": a.dtype.name, "shape": [int(d) for d in a.shape],
                       "offset": size, "nbytes": a.nbytes}
        if a.nbytes:
            pieces.append(memoryview(a.reshape(-1).view(np.uint8)))
        size += a.nbytes
    return pieces, index


def _tar_parts(members: Mapping[str, bytes | list], stored: WeightsMember | None = None) -> list:
    """A ustar archive of `members` (each bytes, or a list of buffers written one after the
    other), the weights first (as `stored.tar_parts` when given, the same objects) and the
    others in name order, as tarfile writes one (mtime 0, mode 0644, no owner), as the
    buffers that make it rather than through tarfile's copies."""
    if stored is None:
        stored_parts = _member_parts(WEIGHTS, members[WEIGHTS]) if WEIGHTS in members else []
    else:
        stored_parts = stored.tar_parts
    parts: list = list(stored_parts)
    for name in sorted(set(members) - {WEIGHTS}):
        parts += _member_parts(name, members[name])
    # two zero blocks end the archive; not the padding to tar's 10 KiB record, so that a
    # reader can tell a truncated pack by its length alone
    parts.append(b"\0" * (2 * TAR_BLOCK))
    return parts


def _member_parts(name: str, data: bytes | list) -> list:
    """One member as tarfile writes it: its header, its data, the zeros to a whole block."""
    size = _size(data)
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return [info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"), *_pieces(data),
            b"\0" * (-size % TAR_BLOCK)]
