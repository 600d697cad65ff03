"""The CPU facts the rules size their schedules by, and the two steps every rule shares:
running a loop as vector lanes and spreading a loop nest over the cores.

The rules read a target duck-typed (`vector_bits`, `vector_registers`, `num_cores`, as on
`tcc.emit.target.Target`), so `tcc.lower` stays free of the emit room.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir.dtype import bit_width
from tcc.lower.rules.analysis import divisor_at_most
from tcc.lower.schedule import LoopRV, Schedule

# Below this many loop iterations a parallel region costs more than it saves.
MIN_PARALLEL_WORK = 8192
# The backend runs a vectorized loop of at most this many iterations as one vector step.
MAX_WHOLE_VECTOR = 64


@dataclass(frozen=True)
class Machine:
    """Vector width in bits, vector registers and cores of the CPU being compiled for."""

    vector_bits: int = 512
    vector_registers: int = 32
    cores: int = 1

    @staticmethod
    def of(target) -> Machine:
        """The machine of a target (anything with vector_bits/vector_registers/num_cores)."""
        if isinstance(target, Machine):
            return target
        return Machine(target.vector_bits, target.vector_registers, target.num_cores)

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` in one vector register."""
        return max(1, self.vector_bits // max(8, bit_width(dtype)))


def vector_tile(extent: int | None, lanes: int) -> int | None:
    """How many iterations of a loop to run as one vector loop: the whole loop when the
    backend can step through it in vector steps, else the largest divisor of the extent
    worth a vector; a symbolic extent splits by `lanes` (the guard of the last tile is
    lifted from the others by `unswitch_guards`). None for a constant extent without such a
    divisor: a guard on the lanes of every tile would keep the backend from vectorizing, so
    the loop stays serial for LLVM to try."""
    if extent is None:
        return lanes
    if extent <= MAX_WHOLE_VECTOR or extent % 8 == 0:
        return extent
    best = divisor_at_most(extent, MAX_WHOLE_VECTOR)
    return best if 2 * best >= lanes else None


def vector_split(
    sch: Schedule, loop: LoopRV, extent: int | None, lanes: int
) -> tuple[LoopRV | None, LoopRV | None]:
    """(outer part, lanes loop) of `loop` per `vector_tile`: no outer part when the whole
    loop is the lanes loop, no lanes loop when nothing should be vectorized."""
    tile = vector_tile(extent, lanes)
    if tile is None:
        return None, None
    if tile == extent:
        return None, loop
    outer, inner = sch.split(loop, [None, tile])
    return outer, inner


def worth_threads(sch: Schedule, loop: LoopRV, work: int | None, machine: Machine) -> bool:
    """Whether running `loop` on the cores pays: more than one core, more than one iteration
    to share, and enough work in the stage (None: symbolic, assumed large) for the threads."""
    if machine.cores < 2 or (work is not None and work < MIN_PARALLEL_WORK):
        return False
    return getattr(sch.get(loop).extent, "value", 2) >= 2


def parallelize(sch: Schedule, loops: list[LoopRV], work: int | None, machine: Machine) -> None:
    """Fuse perfectly nested outer loops into one and run it on the cores when that pays
    (`worth_threads`)."""
    if machine.cores < 2 or not loops or (work is not None and work < MIN_PARALLEL_WORK):
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if worth_threads(sch, fused, work, machine):
        sch.parallel(fused)
