"""What every compile target has: a kind, a canonical string, and a host."""

from __future__ import annotations

from tcc.errors import TccError


class TargetError(TccError):
    """A target string that does not parse, or names a machine tcc cannot generate code for."""


class Target:
    """A compile target. `kind` picks the schedule rules, the target-specific graph passes
    and the backend (`llvm`: CPU code through LLVM; `cuda`: NVIDIA GPUs through NVRTC);
    `str(target)` is its canonical spelling, the key of tuning records and packs; `host` is
    the CPU target that runs the VM and the shape arithmetic beside the kernels."""

    kind: str = ""

    @property
    def host(self) -> Target:
        raise NotImplementedError
