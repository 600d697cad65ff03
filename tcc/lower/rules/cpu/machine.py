"""The CPU facts the rules size their schedules by, and the steps every CPU rule shares:
running a loop as vector lanes and spreading a loop nest over the cores. Each choice a
tuner may revisit is made with `tcc.lower.rules.decide`.

`Machine.of` reads a target duck-typed (`vector_bits`, `vector_registers`, `num_cores`, as
on `tcc.target.LLVMTarget`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir.dtype import bit_width
from tcc.lower.rules.analysis import divisor_at_most
from tcc.lower.rules.decide import decide, decide_flag
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

    kind = "llvm"  # the rule set it is the machine of (tcc.lower.rules.rule_set)

    @staticmethod
    def of(target) -> Machine:
        """The machine of a target (anything with vector_bits/vector_registers/num_cores)."""
        if isinstance(target, Machine):
            return target
        return Machine(target.vector_bits, target.vector_registers, target.num_cores)

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` in one vector register."""
        return max(1, self.vector_bits // max(8, bit_width(dtype)))


def vector_tile(extent: int | None, lanes: int) -> int:
    """How many iterations of a loop to run as one vector loop: the whole loop when the
    backend can step through it in vector steps, else the largest divisor of the extent
    worth a vector, else `lanes`: the extent (symbolic, or a constant without such a
    divisor) splits by the lanes, and the guard of the last tile is lifted from the others
    by `unswitch_guards` (ZFNet's LRN over 109-wide rows: 10.3 ms as a serial loop for
    LLVM to try, 3.1 ms in guarded 16-lane tiles)."""
    if extent is None:
        return lanes
    if extent <= MAX_WHOLE_VECTOR or extent % 8 == 0:
        return extent
    best = divisor_at_most(extent, MAX_WHOLE_VECTOR)
    return best if 2 * best >= lanes else lanes


def vector_tiles(extent: int | None, lanes: int) -> list[int]:
    """The lanes loops a tuner may choose instead of `vector_tile`'s: one to four registers'
    worth that divide the extent (or split a symbolic one), or the whole loop (0: none)."""
    widths = [w for w in (lanes // 2, lanes, 2 * lanes, 4 * lanes) if w >= 2]
    if extent is None:
        return widths
    return [w for w in widths if w < extent and extent % w == 0] + (
        [extent] if extent <= MAX_WHOLE_VECTOR else [])


def shared_vector_tile(extent: int, lanes: int, pieces: int) -> int | None:
    """A lanes loop that cuts a loop of `extent` into `pieces` parts (the last one guarded
    when they do not divide it), each whole registers; None when a part would be less than
    a register."""
    tile = -(-extent // pieces)
    tile = -(-tile // lanes) * lanes
    return tile if tile < extent else None


def vector_split(
    sch: Schedule, loop: LoopRV, extent: int | None, lanes: int, label: str, pieces: int = 1
) -> tuple[LoopRV | None, LoopRV | None]:
    """(outer part, lanes loop) of `loop`: per `vector_tile`, or another of `vector_tiles`
    as decided for `label`; no outer part when the whole loop is the lanes loop, no lanes
    loop when nothing should be vectorized. With `pieces` above 1 (the cores, when the
    loops outside give them nothing to share), a loop `vector_tile` would take whole is
    cut into that many parts instead (`shared_vector_tile`), so the outer part can run on
    threads: a batch-1 fully connected layer (9216 x 4096, AlexNet's first) streamed its
    weights in 11.2 ms on one core of an Intel Xeon, in 5.8 ms on two."""
    whole = vector_tile(extent, lanes)
    tile = whole
    if pieces > 1 and extent is not None and whole == extent:
        tile = shared_vector_tile(extent, lanes, pieces) or whole
    tile = decide(sch, label, [tile, whole, *vector_tiles(extent, lanes), 0], tile)
    if tile == 0:
        return None, None
    if tile == extent:
        return None, loop
    outer, inner = sch.split(loop, [None, tile])
    return outer, inner


def _worth_threads(work: int | None) -> bool:
    """Whether a stage has the work (None: symbolic, assumed large) to pay for threads."""
    return work is None or work >= MIN_PARALLEL_WORK


def _iterations(sch: Schedule, loops: list[LoopRV]) -> int | None:
    """How many iterations `loops` make together; None when an extent is symbolic."""
    shared = 1
    for loop in loops:
        extent = sch.get(loop).extent
        if not isinstance(extent, E.IntImm):
            return None
        shared *= extent.value
    return shared


def enough_to_share(sch: Schedule, loops: list[LoopRV], machine: Machine) -> bool:
    """Whether `loops` (symbolic extents count as many) give every core several iterations:
    then a loop inside them may stay serial. Over symbolic extents it pays to: the fused
    loop's variable is taken apart into indices by real divisions, once per iteration."""
    shared = _iterations(sch, loops)
    return shared is None or shared >= 4 * machine.cores


def pieces_for_threads(sch: Schedule, loops: list[LoopRV], work: int | None,
                       machine: Machine) -> int:
    """How many parts a stage's vector loop should give the threads (`vector_split`): the
    cores when the loops outside it (`loops`) give them fewer iterations than there are
    cores and the stage has the work to pay for threads, else 1."""
    if machine.cores < 2 or not _worth_threads(work):
        return 1
    shared = _iterations(sch, loops)
    return machine.cores if shared is not None and shared < machine.cores else 1


def threads_decided(sch: Schedule, loop: LoopRV, work: int | None, machine: Machine,
                    label: str) -> bool:
    """Whether to run `loop` on the cores. Untuned: when that pays, with more than one core,
    more than one iteration to share, and enough work in the stage (None: symbolic, assumed
    large) for the threads; a tuner may decide otherwise wherever there are cores and
    iterations to share."""
    if machine.cores < 2 or getattr(sch.get(loop).extent, "value", 2) < 2:
        return False
    return decide_flag(sch, label, _worth_threads(work))


def parallelize(sch: Schedule, loops: list[LoopRV], work: int | None, machine: Machine,
                label: str) -> None:
    """Fuse perfectly nested outer loops into one and run it on the cores when decided
    (`threads_decided`); untuned, they are fused only when the work is worth threads."""
    if machine.cores < 2 or not loops:
        return
    shared = 1
    for loop in loops:
        shared *= getattr(sch.get(loop).extent, "value", 2)
    worth = _worth_threads(work)
    if shared < 2:  # nothing to share: as untuned, fused when worth it, never parallel
        if worth and len(loops) > 1:
            sch.fuse(*loops)
        return
    if decide_flag(sch, label, worth):
        sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])
