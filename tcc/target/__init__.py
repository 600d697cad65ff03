"""Compile targets (DESIGN.md §2): a kind (`llvm`, `cuda`) with its attributes and a host.

`parse_target` reads the strings users write (`llvm`, `llvm -mtriple=aarch64-linux-gnu`,
`cuda -arch=sm_80,sm_90`); `str(target)` gives them back canonically. Lowering, tuning and
emit ask the target's `kind` which rules, passes and backend apply; docs/target.md lists
the options.
"""

from __future__ import annotations

from tcc.target.base import Target, TargetError
from tcc.target.cuda import CUDATarget, parse_cuda
from tcc.target.llvm import LLVMTarget, host_target, parse_llvm

__all__ = ["CUDATarget", "LLVMTarget", "Target", "TargetError", "host_target", "parse_target"]

_PARSERS = {"llvm": parse_llvm, "cuda": parse_cuda}


def parse_target(text: str | Target, host: str | Target | None = None) -> Target:
    """The target `text` names (a Target passes through). `host`, for a CUDA target, is the
    CPU target of the host (default: this machine)."""
    if isinstance(text, Target):
        return text
    words = text.split()
    kind = words[0] if words else ""
    if kind not in _PARSERS:
        raise TargetError(
            f"unknown target kind {kind!r} in {text!r}; expected one of {', '.join(_PARSERS)} "
            "(e.g. 'llvm', 'llvm -mtriple=aarch64-linux-gnu' or 'cuda -arch=sm_90')"
        )
    if kind == "cuda":
        return parse_cuda(text, parse_target(host) if host is not None else None)
    if host is not None:
        raise TargetError(f"an llvm target is its own host; drop the host {str(host)!r}")
    return parse_llvm(text)
