"""The CUDA target: `cuda [-arch=sm_80,sm_90] [-max-threads-per-block=N] ...`.

A CUDA target lists the GPU architectures a pack carries a cubin for (NVRTC compiles one
per arch, plus PTX of the newest for GPUs that came later), and the per-block limits the
schedule rules size their kernels by. The limits hold on every listed arch: the default of
each is the smallest that any listed arch allows without opting in (shared memory above
48 KiB a block needs a launch attribute, which tcc does not set). `cuda` alone means
`-arch=sm_80,sm_90` (A100 and H100; the cubins also run on the other GPUs of those
generations, the PTX on newer ones). The host, which runs the VM and the shape arithmetic,
is an LLVM target: this machine unless said otherwise.

`str(target)` writes every option, archs sorted, so it is the key of tuning records and
packs; the host is not part of it (the kernels do not depend on it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tcc.target.base import Target, TargetError

DEFAULT_ARCHS = (80, 90)
# Limits common to every arch tcc compiles for (sm_50 and later).
MAX_THREADS_PER_BLOCK = 1024
WARP_SIZE = 32
REGISTERS_PER_BLOCK = 65536
SHARED_MEMORY_PER_BLOCK = 48 * 1024  # without the opt-in launch attribute
# The oldest arch NVRTC 12 compiles for, and the first with the instructions the rules use
# for fp16/bf16 matrix products (mma.sync with bf16: sm_80).
MIN_ARCH = 50
TENSOR_CORE_ARCH = 80

_OPTIONS = {
    "arch": None,
    "max-threads-per-block": MAX_THREADS_PER_BLOCK,
    "max-shared-memory-per-block": SHARED_MEMORY_PER_BLOCK,
    "registers-per-block": REGISTERS_PER_BLOCK,
}
_HINT = ("expected -arch=sm_80[,sm_90...], -max-threads-per-block=N, "
         "-max-shared-memory-per-block=BYTES or -registers-per-block=N")


@dataclass(frozen=True)
class CUDATarget(Target):
    """NVIDIA GPUs of the listed compute capabilities (80 for sm_80), with the per-block
    limits the kernels must keep, and the CPU target of the host."""

    archs: tuple[int, ...] = DEFAULT_ARCHS
    max_threads_per_block: int = MAX_THREADS_PER_BLOCK
    max_shared_memory_per_block: int = SHARED_MEMORY_PER_BLOCK
    registers_per_block: int = REGISTERS_PER_BLOCK
    host_target: Target | None = None

    kind = "cuda"
    warp_size = WARP_SIZE

    @property
    def host(self) -> Target:
        if self.host_target is not None:
            return self.host_target
        from tcc.target.llvm import host_target

        return host_target()

    @property
    def min_arch(self) -> int:
        """The oldest listed arch: what every kernel may rely on."""
        return min(self.archs)

    @property
    def tensor_cores(self) -> bool:
        """Whether every listed arch has the fp16/bf16 matrix instructions the rules use."""
        return self.min_arch >= TENSOR_CORE_ARCH

    def __str__(self) -> str:
        return (f"cuda -arch={','.join(f'sm_{a}' for a in self.archs)}"
                f" -max-threads-per-block={self.max_threads_per_block}"
                f" -max-shared-memory-per-block={self.max_shared_memory_per_block}"
                f" -registers-per-block={self.registers_per_block}")


def _arch(word: str, text: str) -> int:
    m = re.fullmatch(r"sm_(\d+)a?", word)
    if not m or int(m.group(1)) < MIN_ARCH:
        raise TargetError(f"bad CUDA arch {word!r} in {text!r}; write sm_XX with XX at least "
                          f"{MIN_ARCH}, e.g. -arch=sm_80 or -arch=sm_80,sm_90")
    return int(m.group(1))


def parse_cuda(text: str, host: Target | None = None) -> CUDATarget:
    """Parse `cuda`, `cuda -arch=sm_90`, `cuda -arch=sm_80,sm_90 -max-threads-per-block=512`."""
    opts: dict[str, str] = {}
    for word in text.split()[1:]:
        key, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or key not in _OPTIONS or not eq or not value:
            raise TargetError(f"bad target option {word!r} in {text!r}; {_HINT}")
        if key in opts:
            raise TargetError(f"target option -{key} is given twice in {text!r}; keep one")
        opts[key] = value
    archs = DEFAULT_ARCHS
    if "arch" in opts:
        archs = tuple(sorted({_arch(w, text) for w in opts["arch"].split(",")}))
    limits = {}
    for key in ("max-threads-per-block", "max-shared-memory-per-block", "registers-per-block"):
        value = opts.get(key, str(_OPTIONS[key]))
        if not value.isdigit() or not 0 < int(value) <= _OPTIONS[key]:
            raise TargetError(f"-{key} must be a whole number from 1 to {_OPTIONS[key]} "
                              f"(the least any CUDA arch allows), got {value!r} in {text!r}")
        limits[key.replace("-", "_")] = int(value)
    if host is not None and host.kind != "llvm":
        raise TargetError(f"the host of a CUDA target must be an llvm target, not {str(host)!r}")
    return CUDATarget(archs, host_target=host, **limits)
