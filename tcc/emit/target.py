"""Compile targets: the `llvm [-mtriple=...] [-mcpu=...] [-mattr=...]` strings and their machines.

`llvm` alone means the host: the process triple, the host CPU and every feature it has, so
the code uses the vector units of the machine that compiles it (`-mcpu=native` says the same
and `-mattr` then adds to the host's features). A `-mtriple` names another machine
(cross-compiling); without `-mcpu` it gets the triple's generic CPU, so the code runs on
every CPU of that architecture. `str(target)` is the canonical spelling (every option
written, features sorted), which packs and tuning records use as the target's key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

from tcc.errors import TccError

_OPTIONS = ("mtriple", "mcpu", "mattr")


class TargetError(TccError):
    """A target string that does not parse, or names a machine LLVM cannot generate code for."""


@dataclass(frozen=True)
class Target:
    """An LLVM CPU target: triple, CPU name and feature list (`+avx2,-avx512f`)."""

    triple: str
    cpu: str
    features: str = ""

    @property
    def kind(self) -> str:
        return "llvm"

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def is_host(self) -> bool:
        """True when code for this target runs in this process (same architecture and OS)."""
        return _same_machine(self.triple, llvm.get_process_triple())

    def __str__(self) -> str:
        text = f"llvm -mtriple={self.triple} -mcpu={self.cpu}"
        return text + (f" -mattr={self.features}" if self.features else "")

    def target_machine(self) -> llvm.TargetMachine:
        """An LLVM target machine emitting position-independent code (for shared objects)."""
        _initialize()
        try:
            tgt = llvm.Target.from_triple(self.triple)
        except RuntimeError as e:
            raise TargetError(
                f"LLVM cannot generate code for triple {self.triple!r} ({e}); "
                "use a triple such as x86_64-linux-gnu or aarch64-linux-gnu"
            ) from None
        return tgt.create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="pic", codemodel="default"
        )


@functools.cache
def _initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _same_machine(a: str, b: str) -> bool:
    pa, pb = a.split("-"), b.split("-")
    os_a = next((p for p in pa[1:] if p in ("linux", "darwin", "windows")), None)
    os_b = next((p for p in pb[1:] if p in ("linux", "darwin", "windows")), None)
    return pa[0] == pb[0] and os_a == os_b


@functools.cache
def host_target() -> Target:
    """The machine running this process, with every feature its CPU has."""
    _initialize()
    features = llvm.get_host_cpu_features().flatten()
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(), _sorted_features(features))


def _sorted_features(features: str) -> str:
    """Features sorted by name; of two settings of one feature the later wins (-mattr over host)."""
    chosen: dict[str, str] = {}
    for f in (f.strip() for f in features.split(",")):
        if not f:
            continue
        if f[0] not in "+-" or len(f) == 1:
            raise TargetError(
                f"CPU feature {f!r} must start with + or -; write -mattr=+{f.lstrip('+-')} to enable it"
            )
        chosen[f[1:]] = f[0]
    return ",".join(sign + name for name, sign in sorted(chosen.items()))


def parse_target(text: str | Target) -> Target:
    """Parse `llvm`, `llvm -mtriple=T -mcpu=C -mattr=+a,-b` (a Target passes through)."""
    if isinstance(text, Target):
        return text
    words = text.split()
    if not words or words[0] != "llvm":
        kind = words[0] if words else ""
        raise TargetError(
            f"unknown target kind {kind!r} in {text!r}; expected 'llvm' "
            "(e.g. 'llvm' or 'llvm -mtriple=aarch64-linux-gnu')"
        )
    opts: dict[str, str] = {}
    for word in words[1:]:
        key, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or key not in _OPTIONS or not eq or not value:
            raise TargetError(
                f"bad target option {word!r} in {text!r}; expected "
                "-mtriple=TRIPLE, -mcpu=CPU or -mattr=+feature,-feature"
            )
        if key in opts:
            raise TargetError(f"target option -{key} is given twice in {text!r}; keep one")
        opts[key] = value
    host = host_target()
    triple = opts.get("mtriple", host.triple)
    native = opts.get("mcpu") == "native" or ("mtriple" not in opts and "mcpu" not in opts)
    if native and not _same_machine(triple, host.triple):
        raise TargetError(
            f"-mcpu=native names this machine ({host.triple}), not {triple!r}; "
            "name the CPU of the other machine, e.g. -mcpu=cortex-a72"
        )
    cpu = host.cpu if native else opts.get("mcpu", "generic")
    features = ",".join(f for f in (host.features if native else "", opts.get("mattr", "")) if f)
    target = Target(triple, cpu, _sorted_features(features))
    target.target_machine()  # reject unknown triples now, with the message above
    return target
