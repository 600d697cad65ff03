"""Shared pieces of the CPU backend: its error type and linking object code into a shared object.

The shared object is what the Python loader (and later the C runtime) dlopens. It is linked
by the system C compiler, so tcc needs no linker of its own; where there is none the pack
carries the object code alone.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

from tcc.errors import TccError
from tcc.outfile import scratch_dir


class CodegenError(TccError):
    """A PrimFunc the LLVM backend cannot translate (unsupported dtype, loop kind, unbound size)."""


@functools.cache
def c_compiler() -> str | None:
    """The system C compiler (`$CC`, else `cc`, `gcc`, `clang`), or None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def link_shared(objects: list[bytes], libraries: list[str]) -> bytes | None:
    """Link ELF objects, in order, into a shared object (`cc -shared`), or None without a
    C compiler.

    The temporary names never reach the output: each object's own module name is its
    source file name, so linking the same objects twice gives the same bytes.
    """
    cmd = ["-shared", "-Wl,-z,noexecstack"]
    if "gomp" in libraries:
        # unloading these kernels must never unload libgomp under its idle worker threads
        cmd.append("-Wl,-z,nodelete")
    cmd += [f"-l{lib}" for lib in libraries]
    return _link(objects, cmd, "kernels.so", "install the C toolchain's libraries (libm, "
                 "libgomp) or set CC to a working compiler")


def combine_objects(objects: list[bytes]) -> bytes:
    """One relocatable ELF object holding `objects`, in order (`cc -r`): the pack's object
    member when kernels are compiled apart. Only called where there is a C compiler."""
    if len(objects) == 1:
        return objects[0]
    out = _link(objects, ["-r", "-nostdlib"], "kernels.o", "set CC to a working compiler")
    if out is None:
        raise CodegenError("combining the kernels' objects needs a C compiler; install one (cc)")
    return out


def _link(objects: list[bytes], options: list[str], output: str, fix: str) -> bytes | None:
    cc = c_compiler()
    if cc is None:
        return None
    try:
        with scratch_dir("tcc-link-") as tmp:
            return _link_in(tmp, cc, objects, options, output, fix)
    except OSError as e:
        raise CodegenError(f"cannot link the kernels in the temporary folder {tempfile.gettempdir()}: "
                           f"{e.strerror or e}; free space there or set TMPDIR to another folder") from None


def _link_in(tmp: str, cc: str, objects: list[bytes], options: list[str], output: str,
             fix: str) -> bytes:
    names = []
    for i, code in enumerate(objects):
        names.append(f"k{i}.o")
        with open(os.path.join(tmp, names[-1]), "wb") as f:
            f.write(code)
    # the objects before the options: -l libraries resolve what the objects leave open
    cmd = [cc, "-o", output, *names, *options]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split())[:400]
        if "No space left" in detail:
            raise OSError(28, "No space left on device")
        raise CodegenError(f"linking the kernels with {cc} {options[0]} failed: {detail}; {fix}")
    with open(os.path.join(tmp, output), "rb") as f:
        return f.read()
