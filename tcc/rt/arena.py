"""Offset planning of an arena: where each planned tensor of a function call lives inside one
buffer (docs/vm.md, "Memory planning").

This is the one Python implementation of the packing that the VM's `alloc_arena` runs (the
C runtime's vm.c mirrors it line for line, so both runtimes place every tensor at the same
offset) and that `tcc show` and the planner use to report arena sizes. It is TFLite's and
TVM's "greedy by size": tensors sorted by size, largest first (ties: earlier start, then
lower index), each placed at the lowest ARENA_ALIGN-aligned offset where it overlaps no
tensor already placed whose lifetime overlaps its own. Lifetimes are closed intervals
[start, end] of time points (instruction indices in a pack), so a tensor that dies where
another is born never shares its bytes with it: a kernel may read an input while it writes
its output. Sizes are byte counts, each rounded up to ARENA_ALIGN for the packing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tcc.rt.format import ARENA_ALIGN


@dataclass(frozen=True)
class ArenaPlan:
    """The offset of every tensor (multiples of ARENA_ALIGN) and the arena's size in bytes."""

    offsets: tuple[int, ...]
    size: int


def padded(nbytes: int) -> int:
    """A tensor's byte size rounded up to the arena alignment."""
    return -(-nbytes // ARENA_ALIGN) * ARENA_ALIGN


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def plan_arena(sizes: Sequence[int], lifetimes: Sequence[tuple[int, int]]) -> ArenaPlan:
    """Greedy-by-size offsets for tensors of `sizes` bytes live over `lifetimes`."""
    spans = [padded(s) for s in sizes]
    # equal sizes: the longest-lived first (Winograd's equal-sized transform buffers in
    # ResNet-50 placed by start alone took 1.25x the lower bound, longest first 1.14x)
    order = sorted(range(len(spans)), key=lambda i: (
        -spans[i], lifetimes[i][0] - lifetimes[i][1], lifetimes[i][0], i))
    offsets = [0] * len(spans)
    placed: list[tuple[int, int, int]] = []  # (offset, end offset, tensor), by offset
    for i in order:
        offset = 0
        for lo, hi, j in placed:
            if not _overlap(lifetimes[i], lifetimes[j]):
                continue
            if lo >= offset + spans[i]:
                break  # the gap below this neighbour holds it
            offset = max(offset, hi)
        offsets[i] = offset
        placed.append((offset, offset + spans[i], i))
        placed.sort()
    return ArenaPlan(tuple(offsets), max((o + s for o, s in zip(offsets, spans)), default=0))


def lower_bound(sizes: Sequence[int], lifetimes: Sequence[tuple[int, int]]) -> int:
    """The largest total size of tensors live at one time point: no placement of them in
    memory, shared or not, takes less."""
    events = sorted([(s, 0, n) for n, (s, _) in zip(sizes, lifetimes)]
                    + [(e, 1, n) for n, (_, e) in zip(sizes, lifetimes)])
    live = best = 0
    for _, dies, n in events:  # at one point, births count before deaths (closed intervals)
        live += -n if dies else n
        best = max(best, live)
    return best


def memory_report(arenas: Sequence[tuple[Sequence[int] | None, Sequence[tuple[int, int]]]]) -> dict:
    """What memory planning does for one function whose arenas hold tensors of these sizes
    (None: sizes that depend on size variables without a value) and lifetimes, all on one
    time axis: `tensors`, `arenas`, `allocated_bytes` (the tensors each allocated on its
    own), `planned_bytes` (the arenas' sizes) and `lower_bound_bytes` (over all of them);
    byte counts are None when some size is unknown."""
    report: dict = {"tensors": sum(len(lt) for _, lt in arenas), "arenas": len(arenas)}
    if any(sizes is None for sizes, _ in arenas):
        return {**report, "allocated_bytes": None, "planned_bytes": None, "lower_bound_bytes": None}
    sizes = [s for ss, _ in arenas for s in ss]
    lifetimes = [lt for _, lts in arenas for lt in lts]
    return {**report, "allocated_bytes": sum(sizes),
            "planned_bytes": sum(plan_arena(ss, lts).size for ss, lts in arenas),
            "lower_bound_bytes": lower_bound(sizes, lifetimes)}
