"""The pack cache: whole packs, by everything a compile reads.

Compiling a model again that tcc compiled before, with the same options and the same tcc,
copies the pack it made then instead of reading the model: for ResNet-50, Python's imports
of onnx and the model's import alone take longer than the copy (docs/compile.md). A model
that changed is a miss here, and its kernels still come from the kernel cache
(tcc.emit.object_cache).

The key (`key`) hashes build_identity() (tcc's sources and LLVM's version); the Python
version and the versions of the packages a compile runs (numpy, onnx, ml_dtypes, and torch
for a program); the C compiler that links the kernels (its path, size and time); the
target as parsed (this CPU's name and features); TCC_VERIFY; the compile's options; and the
bytes of the source file and of the tuning database. The files an ONNX model keeps its
weights in (external data) are known only once the model is read: an entry lists them with
the digest of each, and a hit checks them again, so changed weights are a miss (as
ccache's direct mode keeps the headers a source included).

An entry is one file, `<dir>/<key[:2]>/<key[2:]>`: a magic line, the length and text of a
JSON header (the files read besides the source, the warnings the compile printed), the
checksum of the pack, then the pack. It is written to a temporary file and renamed into
place; an entry that was cut short or changed on disk is a miss and is written again. A
hit marks the entry used (its modification time); after each new entry, the least
recently used ones are deleted while the folder holds more than `TCC_PACK_CACHE_MB`
megabytes (default 2048; 0 turns the pack cache off). Like the kernel cache, it only saves
time: a folder that cannot be used makes every compile a miss, never a failed compile.
Only CPU packs are cached (a CUDA pack also depends on the NVRTC found at compile time),
and no signed pack is.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

MAGIC = b"tcc-pack-cache 1\n"
DEFAULT_LIMIT_MB = 2048
_CHUNK = 1 << 24


def limit_bytes() -> int:
    """The most the pack cache may hold (`TCC_PACK_CACHE_MB`); 0: no pack cache."""
    text = os.environ.get("TCC_PACK_CACHE_MB", "")
    try:
        return max(0, int(text)) << 20 if text.strip() else DEFAULT_LIMIT_MB << 20
    except ValueError:
        return DEFAULT_LIMIT_MB << 20


def file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _versions(program: bool) -> str:
    from importlib import metadata

    names = ["numpy", "onnx", "ml_dtypes", *(["torch"] if program else [])]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return f"python {sys.version}; " + "; ".join(found)


def _linker() -> str:
    from tcc.emit.support import c_compiler

    path = c_compiler()
    if path is None:
        return "no C compiler"
    st = os.stat(path)
    return f"{os.path.realpath(path)} {st.st_size} {st.st_mtime_ns}"


class PackCache:
    """Packs by key, in a folder (`cache_dir("packs")` by default)."""

    def __init__(self, root: Path | str | None = None, limit: int | None = None):
        from tcc.emit.object_cache import cache_dir

        self.root = Path(root) if root is not None else cache_dir("packs")
        self.limit = limit_bytes() if limit is None else limit

    def key(self, source, target: str, options: dict, db=None) -> str:
        """The key of compiling the file `source` for `target` (a parsed target's string)
        with `options` (plain values) and the tuning database `db` (a path, or None)."""
        from tcc.emit.object_cache import build_identity

        h = hashlib.sha256(MAGIC + build_identity().encode())
        program = Path(source).suffix == ".pt2"
        # TCC_VERIFY=1 refuses what a compile without it guards (tcc.ir.verify)
        for part in (_versions(program), _linker(), target, os.environ.get("TCC_VERIFY", ""),
                     json.dumps(options, sort_keys=True), Path(source).suffix,
                     file_digest(source), "-" if db is None else file_digest(db)):
            h.update(b"\0" + part.encode())
        return h.hexdigest()

    def lookup(self, source, target: str, db, options: dict) -> tuple[str | None, tuple | None]:
        """(the key of this compile, the entry `get` finds or None); the key is None when a
        file cannot be read (the compile then says why)."""
        try:
            key = self.key(source, target, options, db)
        except OSError:
            return None, None
        return key, self.get(key, source)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key[2:]

    def get(self, key: str, source) -> tuple[bytes, dict] | None:
        """The pack and its header, or None: no entry, one that does not check out, or one
        whose other files (external data beside `source`) changed since."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    return None
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
                digest = f.read(32)
                data = f.read()
        except (OSError, ValueError):
            return None
        if hashlib.sha256(data).digest() != digest:
            return None
        base = Path(source).parent
        for name, expected in header.get("files", {}).items():
            try:
                if file_digest(base / name) != expected:
                    return None
            except OSError:
                return None
        try:
            os.utime(path)  # used now: the last to be evicted
        except OSError:
            pass
        return data, header

    def put(self, key: str, data: bytes, source, files: list[str], warnings: dict) -> None:
        """Store `data` (the pack compiled from `source`, which read `files` beside it) with
        the `warnings` its compile printed; then evict down to the limit."""
        path = self._path(key)
        base = Path(source).parent
        try:
            header = json.dumps({"files": {name: file_digest(base / name) for name in files},
                                 "warnings": warnings}).encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(MAGIC + len(header).to_bytes(8, "little") + header)
                    f.write(hashlib.sha256(data).digest())
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self.evict()
        except OSError:
            pass  # a cache that cannot be written costs time, never the compile

    def evict(self) -> None:
        """Delete the least recently used entries while the folder holds more than the limit."""
        entries = []
        for sub in self.root.iterdir():
            if sub.is_dir():
                for entry in sub.iterdir():
                    if entry.name.startswith(".tmp-"):  # another compile's entry being written
                        continue
                    st = entry.stat()
                    entries.append((st.st_mtime_ns, st.st_size, entry))
        kept = 0
        for _, size, entry in sorted(entries, key=lambda e: e[0], reverse=True):
            kept += size
            if kept > self.limit:
                entry.unlink(missing_ok=True)
