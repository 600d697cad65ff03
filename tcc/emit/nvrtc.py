"""tcc's one binding of NVRTC, NVIDIA's runtime compiler: CUDA C -> cubin or PTX, through ctypes.

NVRTC compiles without a GPU or a driver, so every CUDA kernel of a pack is built (and tested)
on any machine that has the library. It comes from the `nvidia-cuda-nvrtc-cu12` wheel, the
`tcc[cuda]` extra; `$TCC_NVRTC` names the library file instead, and a libnvrtc on the system
library path is the last resort. The library is loaded once, on first use, so importing this
module never fails.

Every compile is given `-arch` and the fixed `FIXED_OPTIONS` and nothing that depends on the
machine, the time or the program's name, so the same source gives the same bytes on every
call: packs are byte-identical across compiles (DESIGN.md §6).

NVRTC ships no headers of its own beyond its built-in device declarations: `cuda_fp16.h` and
`cuda_bf16.h` come from the `nvidia-cuda-runtime-cu12` wheel (`nvidia/cuda_runtime/include`),
passed as `-I<dir>` in `options`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from tcc.errors import TccError

ENV = "TCC_NVRTC"
INSTALL_HINT = "compiling CUDA kernels needs NVRTC; install it with `pip install 'tcc[cuda]'`"
# Pinned rather than left to NVRTC's defaults, which change between releases.
FIXED_OPTIONS = ("--std=c++17",)
_COMPILATION_FAILED = 6  # NVRTC_ERROR_COMPILATION


class NvrtcError(TccError):
    """A CUDA program that NVRTC rejected (its whole log is `.log`), or no NVRTC to compile with."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def _package_library() -> Path | None:
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    except ImportError:  # no `nvidia` namespace package at all
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder, "lib", "libnvrtc.so.12")
        if candidate.is_file():
            return candidate
    return None


def _declare(lib: ctypes.CDLL) -> None:
    """Every signature used, in one place, so a wrong argument is a ctypes error, not a crash."""
    c_int_p, c_size_p = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
    prog, prog_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    strings = ctypes.POINTER(ctypes.c_char_p)
    signatures = {
        "nvrtcVersion": (c_int_p, c_int_p),
        "nvrtcGetNumSupportedArchs": (c_int_p,),
        "nvrtcGetSupportedArchs": (c_int_p,),
        "nvrtcCreateProgram": (prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                               strings, strings),
        "nvrtcDestroyProgram": (prog_p,),
        "nvrtcCompileProgram": (prog, ctypes.c_int, strings),
        "nvrtcGetProgramLogSize": (prog, c_size_p),
        "nvrtcGetProgramLog": (prog, ctypes.c_char_p),
        "nvrtcGetPTXSize": (prog, c_size_p),
        "nvrtcGetPTX": (prog, ctypes.c_char_p),
        "nvrtcGetCUBINSize": (prog, c_size_p),
        "nvrtcGetCUBIN": (prog, ctypes.c_char_p),
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    lib.nvrtcGetErrorString.argtypes = (ctypes.c_int,)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p


@functools.cache
def _library() -> ctypes.CDLL:
    """Not cached when it raises, so installing the wheel mid-session takes effect."""
    explicit = os.environ.get(ENV)
    package = None if explicit else _package_library()
    if explicit:
        candidates = [explicit]
    else:
        system = ctypes.util.find_library("nvrtc") or "libnvrtc.so.12"
        candidates = [str(package), system] if package else [system]
    failures = []
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as error:
            failures.append(str(error))
            continue
        _declare(lib)
        return lib
    if explicit:
        looked = f"{ENV}: {failures[0]}"
    elif package:
        looked = "; ".join(failures)
    else:
        looked = "no libnvrtc in the nvidia-cuda-nvrtc-cu12 package or on the library path"
    raise NvrtcError(f"{INSTALL_HINT} ({looked})")


def nvrtc_available() -> bool:
    try:
        _library()
    except NvrtcError:
        return False
    return True


def _check(result: int, call: str) -> None:
    if result != 0:
        what = _library().nvrtcGetErrorString(result).decode()
        raise NvrtcError(f"NVRTC's {call} failed with {what}")


def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


@functools.cache
def _archs() -> tuple[int, ...]:
    lib, count = _library(), ctypes.c_int()
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * count.value)()
    _check(lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return tuple(archs)


def supported_archs() -> list[int]:
    """Asked of the library, not listed here: each NVRTC release adds new GPUs and drops old ones."""
    return list(_archs())


def _first_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line:
            return line
    return lines[0] if lines else "no log"


def _read(lib: ctypes.CDLL, prog: ctypes.c_void_p, kind: str) -> bytes:
    size = ctypes.c_size_t()
    _check(getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(size)), f"nvrtcGet{kind}Size")
    buffer = ctypes.create_string_buffer(size.value)
    _check(getattr(lib, f"nvrtcGet{kind}")(prog, buffer), f"nvrtcGet{kind}")
    return buffer.raw


def compile_cuda(source: str, name: str, arch: int, *, ptx: bool = False,
                 options: Sequence[str] = ()) -> bytes:
    """PTX comes back without NVRTC's closing NUL, as text to store; cuModuleLoadData needs one.

    `name` is the program's file name in NVRTC's messages; it is not part of the output.
    """
    if arch not in _archs():
        known = ", ".join(f"sm_{a}" for a in _archs())
        major, minor = nvrtc_version()
        raise NvrtcError(f"NVRTC {major}.{minor} cannot compile {name!r} for sm_{arch}; "
                         f"choose one of the architectures it supports: {known}")
    for option in options:
        if option.startswith(("-arch", "--gpu-architecture")):
            raise NvrtcError(f"option {option!r} for {name!r} sets the architecture, which is "
                             "compile_cuda's `arch`; pass that instead")
    target = f"-arch={'compute' if ptx else 'sm'}_{arch}"
    args = [target, *FIXED_OPTIONS, *options]
    lib, prog = _library(), ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None,
                                  None), "nvrtcCreateProgram")
    try:
        argv = (ctypes.c_char_p * len(args))(*(a.encode() for a in args))
        result = lib.nvrtcCompileProgram(prog, len(args), argv)
        if result != 0:
            log = _read(lib, prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")
            if result != _COMPILATION_FAILED and not log.strip():
                log = lib.nvrtcGetErrorString(result).decode()
            raise NvrtcError(f"NVRTC could not compile {name!r} for {target[6:]}: "
                             f"{_first_error(log)}", log)
        return _read(lib, prog, "PTX").rstrip(b"\0") if ptx else _read(lib, prog, "CUBIN")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def compile_for_archs(source: str, name: str, archs: Sequence[int],
                      options: Sequence[str] = ()) -> dict[str, bytes]:
    """The PTX of the newest arch lets a GPU newer than all of them JIT the kernel in the driver.

    Keys are `sm_<arch>` in ascending order, then `compute_<highest>.ptx`.
    """
    from tcc.forked import available_cores, forked_map

    wanted = sorted(set(archs))
    if not wanted:
        raise NvrtcError(f"no architecture to compile {name!r} for; name at least one, e.g. 80")
    jobs = [(f"sm_{arch}", arch, False) for arch in wanted]
    jobs.append((f"compute_{wanted[-1]}.ptx", wanted[-1], True))

    def build(job):  # an error comes back as a value, so its log survives the pool
        try:
            return compile_cuda(source, name, job[1], ptx=job[2], options=options)
        except NvrtcError as e:
            return e.args[0], e.log

    # Each output is a whole NVRTC compile of the module; they run side by side.
    built = forked_map(build, jobs, jobs=available_cores())
    for result in built:
        if isinstance(result, tuple):
            raise NvrtcError(*result)
    return {key: result for (key, _, _), result in zip(jobs, built)}


HEADERS_HINT = ("CUDA source with float16 values includes cuda_fp16.h (and with __nv_bfloat16, "
                "cuda_bf16.h), which come with the CUDA runtime wheel; install it with "
                "`pip install 'tcc[cuda]'`")


def runtime_include() -> Path | None:
    """The folder of the CUDA runtime wheel's headers (nvidia-cuda-runtime-cu12), or None."""
    try:
        spec = importlib.util.find_spec("nvidia.cuda_runtime")
    except ImportError:
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if Path(folder, "include", "cuda_fp16.h").is_file():
            return Path(folder, "include")
    return None


def header_options(source: str) -> list[str]:
    """What NVRTC needs beyond the fixed options to compile `source`: the runtime wheel's
    include folder when it includes the half-precision headers (an NvrtcError saying how
    to install it when it is missing). The folder's path is no part of the output."""
    if "#include <cuda_fp16.h>" not in source and "#include <cuda_bf16.h>" not in source:
        return []
    folder = runtime_include()
    if folder is None:
        raise NvrtcError(HEADERS_HINT)
    return [f"-I{folder}"]
