"""The CPU target: `llvm [-mtriple=...] [-mcpu=...] [-mattr=...]` strings and their machines.

`llvm` alone means the host: the process triple, the host CPU and every feature it has, so
the code uses the vector units of the machine that compiles it (`-mcpu=native` says the same
and `-mattr` then adds to the host's features). A `-mtriple` names another machine
(cross-compiling); without `-mcpu` it gets the triple's generic CPU, so the code runs on
every CPU of that architecture. `str(target)` is the canonical spelling (every option
written, features sorted), which packs and tuning records use as the target's key.

`-fp-contract=off` keeps every float multiply and add rounded on its own, as IEEE and numpy
do; by default (`on`) LLVM may fuse `a * b + c` into one fused multiply-add, which rounds
once: about twice the arithmetic throughput, and results that differ in the last bits.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import llvmlite.binding as llvm

from tcc.target.base import Target, TargetError

_OPTIONS = ("mtriple", "mcpu", "mattr", "fp-contract")


@dataclass(frozen=True)
class LLVMTarget(Target):
    """An LLVM CPU target: triple, CPU name, feature list (`+avx2,-avx512f`), and whether
    float multiplies and adds may fuse into fused multiply-adds. It is its own host."""

    triple: str
    cpu: str
    features: str = ""
    fp_contract: bool = True

    kind = "llvm"

    @property
    def host(self) -> LLVMTarget:
        return self

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def is_host(self) -> bool:
        """True when code for this target runs in this process (same architecture and OS)."""
        return _same_machine(self.triple, llvm.get_process_triple())

    @property
    def vector_bits(self) -> int:
        """Width of the widest vector registers the features enable: 512 with avx512f, 256
        with avx/avx2, else 128 (SSE2 and NEON are the x86-64 and AArch64 baselines)."""
        enabled = {f[1:] for f in self.features.split(",") if f.startswith("+")}
        if "avx512f" in enabled:
            return 512
        return 256 if enabled & {"avx", "avx2"} else 128

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 and on AArch64, 16 otherwise."""
        return 32 if self.vector_bits == 512 or self.arch == "aarch64" else 16

    @property
    def num_cores(self) -> int:
        """Cores the compiled code may use: this machine's, read at compile time."""
        return os.cpu_count() or 1

    def __str__(self) -> str:
        text = f"llvm -mtriple={self.triple} -mcpu={self.cpu}"
        text += f" -mattr={self.features}" if self.features else ""
        return text + ("" if self.fp_contract else " -fp-contract=off")

    def target_machine(self, opt: int = 3) -> llvm.TargetMachine:
        """An LLVM target machine emitting position-independent code (for shared objects),
        with code generation at optimization level `opt`."""
        _initialize()
        try:
            tgt = llvm.Target.from_triple(self.triple)
        except RuntimeError as e:
            raise TargetError(
                f"LLVM cannot generate code for triple {self.triple!r} ({e}); "
                "use a triple such as x86_64-linux-gnu or aarch64-linux-gnu"
            ) from None
        return tgt.create_target_machine(
            cpu=self.cpu, features=self.features, opt=opt, reloc="pic", codemodel="default"
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
def host_target() -> LLVMTarget:
    """The machine running this process, with every feature its CPU has."""
    _initialize()
    features = llvm.get_host_cpu_features().flatten()
    return LLVMTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), _sorted_features(features))


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


def parse_llvm(text: str) -> LLVMTarget:
    """Parse `llvm`, `llvm -mtriple=T -mcpu=C -mattr=+a,-b`."""
    words = text.split()
    opts: dict[str, str] = {}
    for word in words[1:]:
        key, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or key not in _OPTIONS or not eq or not value:
            raise TargetError(
                f"bad target option {word!r} in {text!r}; expected "
                "-mtriple=TRIPLE, -mcpu=CPU, -mattr=+feature,-feature or -fp-contract=on|off"
            )
        if key in opts:
            raise TargetError(f"target option -{key} is given twice in {text!r}; keep one")
        opts[key] = value
    contract = opts.get("fp-contract", "on")
    if contract not in ("on", "off"):
        raise TargetError(f"-fp-contract must be on or off, got {contract!r} in {text!r}")
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
    target = LLVMTarget(triple, cpu, _sorted_features(features), contract == "on")
    target.target_machine()  # reject unknown triples now, with the message above
    return target
