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

An entry is two files: the pack, `<dir>/<size>/<digest>.pack`, exactly as compiled, and
its header, `<dir>/<size>/<digest>` (a magic line and JSON: the pack's size and
checksum, the files read besides the source, the warnings the compile printed), where
`<size>` is the source file's size in bytes and `<digest>` the key's hash. Grouped by their
source's size, the entries tell a compile whose source has a size none of them has that it
misses, without hashing anything (`may_hold`): it then hashes the model file beside the
model's import, on a thread of its own (`key_beside`; hashing releases the GIL), where a
lookup has to hash it first (ResNet-50: 0.15 s, 0.09 s of it the model file's sha256).
Only a regular file is hashed: anything else has no key, and its compile is not cached. The
pack
goes into place first and the header last, each by a rename, so an entry with a header is
whole. A compile that has just written its output links the entry's pack to that file where
both are on one file system (`put(..., written=...)`): the pack is written once, not twice
(ResNet-50's 109 MB: 0.4-0.7 s of a cold command on a VM's disk). Since the two names then
share one file, a change to the output (`cp other.tvmpack out.tvmpack` writes in place)
changes the entry: a hit checks the pack's checksum, so such an entry is a miss and is
written again. A hit copies the pack to its output rather than linking it, so that the
output is a file of its own with the time it was written; it copies through a small buffer,
checking the checksum on the way, and keeps the output only if it checks out (ResNet-50's
hit holds no 109 MB copy of the pack: 0.55-1.31 s -> 0.49-0.55 s as a command here). An
entry that was cut short or changed on disk is a miss and is written again. A hit marks the
entry used (its header's modification time, which no output shares); after each new entry,
the least recently used ones are deleted while the folder holds more than
`TCC_PACK_CACHE_MB` megabytes (default 2048; 0 turns the pack cache off). Like the kernel
cache, it only saves time: a folder that cannot be used makes every compile a miss, never a
failed compile.
Only CPU packs are cached (a CUDA pack also depends on the NVRTC found at compile time),
and no signed pack is.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
import threading
from pathlib import Path

MAGIC = b"tcc-pack-cache 3\n"
DEFAULT_LIMIT_MB = 2048


def limit_bytes() -> int:
    """The most the pack cache may hold (`TCC_PACK_CACHE_MB`); 0: no pack cache."""
    text = os.environ.get("TCC_PACK_CACHE_MB", "")
    try:
        return max(0, int(text)) << 20 if text.strip() else DEFAULT_LIMIT_MB << 20
    except ValueError:
        return DEFAULT_LIMIT_MB << 20


def file_digest(path) -> str:
    """The sha256 of the file `path`, read through one buffer (`_sized_digest`): chunks read
    as bytes of their own took ResNet-50's 100 MB of fresh memory, slow to touch on some
    VMs."""
    return _sized_digest(path)[1]


def _sized_digest(path) -> tuple[int, str]:
    """The size and sha256 of the file `path`, as one open of it found them, read through
    one buffer of 4 MB: few enough chunks that a thread hashing it (`KeyBeside`), which
    takes Python's lock back after each, seldom waits on the thread running Python. Anything
    but a regular file is an OSError, not opened: a FIFO would block the open and the read
    (the compile then goes on without the pack cache, and its reader says what is wrong)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"{path}: not a regular file")
    digest = hashlib.sha256()
    buffer = bytearray(4 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return size, digest.hexdigest()


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
        with `options` (plain values) and the tuning database `db` (a path, or None):
        `<size>/<digest>`, the source's size in bytes and a sha256 of all of it."""
        return _with_files(_settings(source, target, options), source, db)

    def may_hold(self, source) -> bool:
        """Whether an entry may be for the file `source`: False when none is for a source of
        its size, a miss known without hashing it."""
        try:
            return (self.root / str(os.stat(source).st_size)).is_dir()
        except OSError:
            return True  # `lookup` finds what is wrong

    def key_beside(self, source, target: str, options: dict, db=None) -> KeyBeside:
        """`key(...)`, its files hashed by a thread while this one goes on (to be joined
        before this process forks): for a compile that `may_hold` says misses, so that
        hashing the model runs beside its import. The rest of the key is Python's work,
        done here: on the thread it would hold Python's lock against the import."""
        try:
            settings = _settings(source, target, options)
        except OSError:  # as `lookup`: no key, the compile says what is wrong
            return KeyBeside(lambda: None)
        return KeyBeside(lambda: _with_files(settings, source, db))

    def lookup(self, source, target: str, db, options: dict,
               output=None) -> tuple[str | None, tuple | None]:
        """(the key of this compile, the entry `get` finds or None, copied to `output` if
        given); the key is None when a file cannot be read (the compile then says why)."""
        try:
            key = self.key(source, target, options, db)
        except OSError:
            return None, None
        return key, self.get(key, source, output)

    def _path(self, key: str) -> Path:
        """The entry's header; its pack is the same name with `.pack`."""
        return self.root / key

    def get(self, key: str, source, output=None) -> tuple[bytes | None, dict] | None:
        """The pack and its header, or None: no entry, one that does not check out, or one
        whose other files (external data beside `source`) changed since. With `output` (a
        path), the pack is copied there as it is checked, whole or not at all, and None
        stands for its bytes: a ResNet-50 hit then holds no 109 MB copy of it."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    return None
                header = json.loads(f.read())
            size, digest = header["size"], header["sha256"]
            base = Path(source).parent
            if any(file_digest(base / name) != expected
                   for name, expected in header.get("files", {}).items()):
                return None
            pack = _pack_path(path)
            if not stat.S_ISREG(os.stat(pack).st_mode):  # never open a FIFO put there
                return None
            if output is not None:
                if not _copy_checked(pack, size, digest, output):
                    return None
                data = None
            else:
                data = pack.read_bytes()
                if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                    return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            os.utime(path)  # used now: the last to be evicted
        except OSError:
            pass
        return data, header

    def put(self, key: str, data, source, files: list[str], warnings: dict,
            written=None, sha256: str | None = None) -> None:
        """Store `data` (the pack compiled from `source`, which read `files` beside it: bytes,
        or a list of buffers one after the other) with the `warnings` its compile printed;
        then evict down to the limit. `written` is a file just written with `data`, which the
        entry links instead of a copy where it can; `sha256` is data's, when known."""
        path = self._path(key)
        base = Path(source).parent
        parts = data if isinstance(data, list) else [data]
        if sha256 is None:
            digest = hashlib.sha256()
            for part in parts:
                digest.update(part)
            sha256 = digest.hexdigest()
        size = sum(memoryview(part).nbytes for part in parts)
        try:
            header = json.dumps({
                "size": size, "sha256": sha256,
                "files": {name: file_digest(base / name) for name in files},
                "warnings": warnings}).encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            if not (written is not None and self._link(written, size, _pack_path(path))):
                self._write(_pack_path(path), parts)
            self._write(path, [MAGIC + header])  # last: the entry is whole from here
            self.evict()
        except OSError:
            pass  # a cache that cannot be written costs time, never the compile

    @staticmethod
    def _link(written, size: int, dest: Path) -> bool:
        """Make `dest` a second name of the regular file `written` of `size` bytes; False
        where it cannot be (another file system, a FIFO or device, a file system without
        links)."""
        try:
            st = os.stat(written)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return False
            tmp = dest.parent / f".tmp-{os.urandom(8).hex()}"
            os.link(os.path.realpath(written), tmp)
        except OSError:
            return False
        try:
            os.replace(tmp, dest)
        except OSError:
            tmp.unlink(missing_ok=True)
            return False
        return True

    @staticmethod
    def _write(dest: Path, parts: list) -> None:
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                for part in parts:
                    f.write(part)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def evict(self) -> None:
        """Delete the least recently used entries while the folder holds more than the limit:
        an entry's header goes first, so that what is left of it is never read as whole."""
        entries: dict[Path, list] = {}  # header path -> [last used, size, files]
        for sub in self.root.iterdir():
            if sub.is_dir():
                for name in sub.iterdir():
                    if name.name.startswith(".tmp-"):  # another compile's file being written
                        continue
                    st = name.stat()
                    header = name.with_suffix("") if name.suffix == ".pack" else name
                    entry = entries.setdefault(header, [0, 0, []])
                    if name == header or not entry[2]:
                        entry[0] = st.st_mtime_ns
                    entry[1] += st.st_size
                    entry[2].insert(0 if name == header else len(entry[2]), name)
        kept = 0
        for _, size, names in sorted(entries.values(), key=lambda e: e[0], reverse=True):
            kept += size
            if kept > self.limit:
                for name in names:
                    name.unlink(missing_ok=True)


def _settings(source, target: str, options: dict):
    """The hash of everything a pack cache key covers but the files' bytes."""
    from tcc.emit.object_cache import build_identity

    h = hashlib.sha256(MAGIC + build_identity().encode())
    program = Path(source).suffix == ".pt2"
    # TCC_VERIFY=1 refuses what a compile without it guards (tcc.ir.verify)
    for part in (_versions(program), _linker(), target, os.environ.get("TCC_VERIFY", ""),
                 json.dumps(options, sort_keys=True), Path(source).suffix):
        h.update(b"\0" + part.encode())
    return h


def _with_files(settings, source, db) -> str:
    """The key: `settings` (`_settings`, not changed) with the source's and the tuning
    database's digests."""
    h = settings.copy()
    size, source_digest = _sized_digest(source)
    for part in (source_digest, "-" if db is None else file_digest(db)):
        h.update(b"\0" + part.encode())
    return f"{size}/{h.hexdigest()}"


class KeyBeside:
    """A pack cache key being computed by a thread of its own."""

    def __init__(self, compute):
        self._key: str | None = None
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(compute,), daemon=True,
                                        name="tcc-pack-cache-key")
        self._thread.start()

    def _run(self, compute) -> None:
        try:
            self._key = compute()
        except OSError:  # a file that cannot be read: the compile says why, uncached
            pass
        except Exception as e:  # noqa: BLE001 (raised where the key is asked for)
            self._error = e

    def result(self) -> str | None:
        """The key, once computed; None when a file it hashes could not be read."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._key


class _Mismatch(Exception):
    """The entry's pack is not the one its header describes: the output is dropped."""


def _copy_checked(pack: Path, size: int, digest: str, output) -> bool:
    """Copy `pack` to the path `output` (whole or not at all) through one small buffer, if it
    has `size` bytes of sha256 `digest`; False, and `output` untouched, if not. An error
    writing `output` is a PackWriteError naming it, as a compile's own write."""
    from tcc.emit.pack import PackWriteError
    from tcc.outfile import open_output

    try:
        with open(pack, "rb") as f, open_output(output, error=PackWriteError) as out:
            found, copied = hashlib.sha256(), 0
            buffer = bytearray(1 << 20)
            view = memoryview(buffer)
            while True:
                try:
                    n = f.readinto(buffer)
                except OSError:  # the cache's file, not the output: a miss
                    raise _Mismatch from None
                if not n:
                    break
                found.update(view[:n])
                out.write(view[:n])
                copied += n
            if copied != size or found.hexdigest() != digest:
                raise _Mismatch
    except _Mismatch:
        return False
    return True


def _pack_path(header: Path) -> Path:
    return header.with_name(header.name + ".pack")
