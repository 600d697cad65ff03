"""Writing output files whole or not at all, and never in place of something that is not a file.

Every file tcc writes (packs, IR files, run outputs) goes through `Staged`: the bytes go to
a temporary file beside the destination, which is renamed over it only once complete and
synced, so a reader sees the old file or the new one, never half of one. Two kinds of
destination are never replaced:

- a character device or a FIFO (`-o /dev/null`, a pipe): the finished bytes are copied
  into it, from an anonymous temporary file that vanishes with the process;
- a directory, socket or block device: refused with a one-line error.

A symbolic link is followed: the file it points to is replaced, the link stays.

Temporaries are named `.<name>.tcc-<host>-<pid>-<random>.tmp`, so that a later write to the
same folder can find those left by a killed process (same host, process gone) and remove
them. `scratch_dir` gives run-time scratch folders the same treatment in the temp dir.

Imports nothing of tcc but its errors.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
from contextlib import contextmanager

from tcc.errors import TccError
from tcc.infile import file_kind

_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP = re.compile(r"\.tcc-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+\.tmp$")


def _temp_suffix() -> str:
    return f".tcc-{_HOST}-{os.getpid()}-{os.urandom(4).hex()}.tmp"


def _is_stale(name: str) -> bool:
    m = _TEMP.search(name)
    if m is None or m["host"] != _HOST or int(m["pid"]) == os.getpid():
        return False
    try:
        os.kill(int(m["pid"]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, someone else's
        return False
    return False


def remove_stale(folder: str, prefix: str = "") -> None:
    """Remove temporaries under `folder` (names starting with `prefix`) that a process of
    this host left behind when it was killed. Best effort: what cannot go stays."""
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and _is_stale(name):
            path = os.path.join(folder, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


class Staged:
    """One output being written: write to `.file`, then `commit()` or `discard()`.

    A destination that cannot be written raises `error` (a TccError class) with the
    message `<what>: <reason>`; `what` defaults to `<path>: cannot write`."""

    def __init__(self, path, what: str | None = None, error: type[TccError] = TccError):
        self.path = os.fsdecode(path)
        self.what = what or f"{self.path}: cannot write"
        self.error = error
        self._tmp: str | None = None
        self._stream = False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise self._fail(e) from None
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            self._stream = True
            self.file = tempfile.TemporaryFile(prefix="tcc-out-")
            return
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise error(f"{self.what}: {self.path} is {file_kind(st.st_mode)}; give the path of a file")
        self.final = os.path.realpath(self.path)
        folder, base = os.path.split(self.final)
        remove_stale(folder, f".{base}.")
        self._tmp = os.path.join(folder, f".{base}{_temp_suffix()}")
        try:
            self.file = open(self._tmp, "xb")  # noqa: SIM115 (closed by commit/discard)
        except OSError as e:
            self._tmp = None
            raise self._fail(e) from None

    def _fail(self, e: OSError) -> TccError:
        return self.error(f"{self.what}: {e.strerror or e}")

    def write(self, data) -> None:
        """Append `data` (bytes or a buffer); an OSError drops what was written and becomes
        `error`."""
        try:
            self.file.write(data)
        except OSError as e:
            self.discard()
            raise self._fail(e) from None

    def commit(self) -> None:
        try:
            if self._stream:
                self.file.flush()
                self.file.seek(0)
                with open(self.path, "wb", buffering=0) as out:
                    shutil.copyfileobj(self.file, out, 1 << 20)
                self.file.close()
                return
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.final)
            self._tmp = None
        except BaseException as e:
            self.discard()
            if isinstance(e, OSError):
                raise self._fail(e) from None
            raise
        _sync_folder(os.path.dirname(self.final))

    def discard(self) -> None:
        """Drop what was written; the destination is untouched. Safe to call twice."""
        try:
            self.file.close()
        except OSError:
            pass
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None


def _sync_folder(folder: str) -> None:
    """Make a rename durable; not every platform can fsync a directory."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


@contextmanager
def open_output(path, what: str | None = None, error: type[TccError] = TccError):
    """`with open_output(p) as f: f.write(...)`: `p` gets everything written, or nothing.
    An OSError while writing becomes `error` naming the path."""
    staged = Staged(path, what, error)
    try:
        yield staged.file
    except OSError as e:
        staged.discard()
        raise staged._fail(e) from None
    except BaseException:
        staged.discard()
        raise
    staged.commit()


def write_output(path, data, what: str | None = None, error: type[TccError] = TccError) -> None:
    """Write `data` (bytes, or a list of buffers one after the other) to `path` whole or not
    at all."""
    with open_output(path, what, error) as f:
        for part in data if isinstance(data, list) else [data]:
            f.write(part)


@contextmanager
def scratch_dir(prefix: str):
    """A private scratch folder in the temp dir, removed on exit; one left by a killed
    process of this host is removed the next time a scratch folder is made."""
    root = tempfile.gettempdir()
    remove_stale(root, prefix)
    path = tempfile.mkdtemp(prefix=prefix, suffix=_temp_suffix(), dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
