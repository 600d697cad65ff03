"""The compile cache: each kernel's object code, stored under a key of everything it is made of.

A key (`ObjectCache.key`) hashes the kernel's exported name, its PrimFunc as printed before
scheduling, how it is scheduled (the default rules, a tuning record's trace, or not at all),
the target string and `build_identity()`: the tcc sources and the LLVM that compile it. So
an entry is found again only where the same compiler would produce the same bytes, and a
pack is byte-identical with or without the cache.

Entries are files under `cache_dir()` (`$TCC_CACHE_DIR`, else `$XDG_CACHE_HOME/tcc/objects`,
else `~/.cache/tcc/objects`), one per key, written whole or not at all (a temporary file
renamed into place), each with a checksum of its contents: an entry that was cut short or
changed on disk is a miss, and is written again. The cache only saves time: a folder that
cannot be read or written makes every kernel a miss, never a failed compile. Nothing is
ever evicted; delete the folder to reclaim its space.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

MAGIC = b"tcc-object-cache 1\n"


def cache_dir(kind: str = "objects") -> Path:
    """The folder of the kernel cache ("objects": `$TCC_CACHE_DIR` itself) or of the pack
    cache ("packs": `$TCC_CACHE_DIR/packs`, tcc.emit.pack_cache); without TCC_CACHE_DIR,
    `$XDG_CACHE_HOME/tcc/<kind>`, else `~/.cache/tcc/<kind>`."""
    explicit = os.environ.get("TCC_CACHE_DIR")
    if explicit:
        return Path(explicit) if kind == "objects" else Path(explicit) / kind
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tcc" / kind


@functools.cache
def build_identity() -> str:
    """A digest of what turns a kernel into object code here: every source file of the tcc
    package and the LLVM version llvmlite carries."""
    import llvmlite.binding as llvm

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"llvm {'.'.join(map(str, llvm.llvm_version_info))}\n".encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


class ObjectCache:
    """Object code by key, in a folder (`cache_dir()` by default)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    @staticmethod
    def key(*parts: str) -> str:
        h = hashlib.sha256(build_identity().encode())
        for part in parts:
            h.update(b"\0" + part.encode())
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key[2:]

    def get(self, key: str) -> bytes | None:
        """The stored bytes, or None when there are none (or they do not check out)."""
        try:
            data = self._path(key).read_bytes()
        except OSError:
            return None
        n = len(MAGIC)
        head, digest, body = data[:n], data[n : n + 32], data[n + 32 :]
        if head != MAGIC or hashlib.sha256(body).digest() != digest:
            return None
        return body

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(MAGIC + hashlib.sha256(data).digest() + data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass  # a cache that cannot be written costs time, never the compile
