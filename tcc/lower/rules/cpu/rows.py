"""Row-wise kernels (softmax, layer norm, other normalizations): every stage computed per
row, inside one parallel loop over the rows.

Applies to a whole kernel of two or more canonical stages whose last stage is elementwise
over `rows x columns` and whose earlier stages each compute, per row, either statistics
(a reduction whose output has one element per row: max, sum, mean, variance) or an
elementwise intermediate; the rows are the longest prefix of the last stage's axes that
every earlier stage shares, with the same extents, as its leading output axes. The last
stage's innermost row axis is split into groups of ROW_GROUP rows, the row loops outside
the group fused into one loop `R`, its innermost column loop runs as vector lanes, and each
earlier stage, from the last back, moves under `R` (`compute_at`): a group's statistics
are computed right before its rows are written, while they are in cache, and the kernel
is one parallel region instead of one per stage (a layer norm had six). A statistics
stage runs its reduction loops outside the group's rows (unrolled), so the rows' sums are
independent chains that overlap instead of one chain of dependent adds at a time (a
512 x 256 layer norm: 133 -> 36 us; with groups of 4 rows, 47 us); an elementwise one
runs its innermost loop as vector lanes (softmax's exps), or, with one value per row (a
mean, a variance), its group loop unrolled. Each stage keeps its own order of arithmetic,
so results do not change.

A stage that would need more than its row under `R` (a contraction: its output has
columns and a reduction) is not a per-row stage; the per-stage rules then schedule the
kernel.

Decisions (`decide`): the rows in a group, the width of each lanes loop, and whether the
row loop runs on threads.
"""

from __future__ import annotations

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.rules.analysis import Stage, canonical_stage, guarded_load_along
from tcc.lower.rules.cpu.machine import (
    Machine,
    threads_decided,
    vector_split,
)
from tcc.lower.rules.decide import decide
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.state import child_blocks

ROW_GROUP = 8  # rows whose statistics are computed interleaved


def _extent(sch: Schedule, axis) -> E.PrimExpr:
    return sch.get(axis.loop).extent


def _per_row(sch: Schedule, stage: Stage, last: Stage, rows: int) -> bool:
    """`stage` computes, for each of the first `rows` axes of `last`, one row of its output:
    those axes lead its own, with the same extents, and index its output's leading dims;
    a reduction's other spatial axes have extent 1."""
    if len(stage.spatial) < rows:
        return False
    for mine, theirs in zip(stage.spatial[:rows], last.spatial[:rows]):
        if not E.prove_equal(_extent(sch, mine), _extent(sch, theirs)):
            return False
    indices = stage.store.indices
    if len(indices) < rows or any(i is not a.var for i, a in zip(indices, stage.spatial)):
        return False
    return not stage.reduce or all(a.extent == 1 for a in stage.spatial[rows:])


def row_count(sch: Schedule, stages: list[Stage], last: Stage) -> int:
    """How many leading axes of `last` are rows (0: the kernel is not row-wise)."""
    for rows in range(len(last.spatial) - 1, 0, -1):
        if all(_per_row(sch, s, last, rows) for s in stages):
            return rows
    return 0


def _vectorize_row(sch: Schedule, block, row, stage: Stage, machine: Machine,
                   label: str) -> None:
    """The innermost loop of an elementwise stage moved under `row` (softmax's exps) as
    vector lanes, when it is not `row` itself and its loads allow."""
    loops = sch.get_loops(block)
    inner = loops[-1]
    if inner == row or guarded_load_along(stage, stage.spatial[-1].var):
        return
    extent = sch.get(inner).extent
    extent = extent.value if isinstance(extent, E.IntImm) else None
    _, lanes = vector_split(sch, inner, extent, machine.lanes(stage.dtype), label)
    if lanes is not None:
        sch.vectorize(lanes)


def _interleave(sch: Schedule, block, group) -> None:
    """A statistics stage under a group of rows: its reduction loops outside the group's
    loop, which is unrolled, so the rows' sums are independent chains (the adds of one
    row wait on each other; the group's rows do not), each row still summed in order."""
    loops = sch.get_loops(block)
    reduce = [lp for lp in loops if sch.get(lp).var in _reduce_vars(sch, block)]
    rows = [lp for lp in loops[loops.index(group) + 1 :] if lp not in reduce]
    if not reduce or len(rows) != 1:
        return
    sch.reorder(*reduce, rows[0])
    init = sch.decompose_reduction(block, reduce[0])
    sch.unroll(rows[0])
    sch.unroll(sch.get_loops(init)[-1])


def _reduce_vars(sch: Schedule, block) -> set:
    """The loop variables bound to the block's reduction iteration variables."""
    stmt = sch.get(block)
    return {
        v
        for iv in stmt.iter_vars
        if iv.kind is T.IterKind.REDUCE
        for v in E.free_vars(iv.binding)
    }


class RowRule:
    name = "rows"

    def apply(self, sch: Schedule, machine: Machine) -> Schedule | None:
        """The whole kernel scheduled per row (rows interleaved in groups of ROW_GROUP, or
        as decided, or one at a time where a primitive refuses that), or None when it is
        not row-wise. Raises ScheduleError when a primitive refuses."""
        names = [b.name for b in child_blocks(sch.func.body)]
        if len(names) < 2:
            return None
        sch = sch.copy()
        group = decide(sch, f"{names[-1]}.row_group", [ROW_GROUP, 1, 2, 4, 16], ROW_GROUP)
        try:
            return self._schedule(sch.copy(), names, machine, group)
        except ScheduleError:
            if group == 1:
                raise
            return self._schedule(sch.copy(), names, machine, 1)

    def _schedule(self, sch: Schedule, names: list[str], machine: Machine,
                  group: int) -> Schedule | None:
        stages = [canonical_stage(sch, sch.get_block(n)) for n in names]
        if any(s is None for s in stages):
            return None
        last = stages[-1]
        if last.reduce or len(last.spatial) < 2:
            return None
        rows = row_count(sch, stages[:-1], last)
        if rows == 0:
            return None
        inner = last.spatial[-1]
        if not guarded_load_along(last, inner.var):
            _, lanes = vector_split(sch, inner.loop, inner.extent, machine.lanes(last.dtype),
                                    f"{names[-1]}.lanes")
            if lanes is not None:
                sch.vectorize(lanes)
        row_loops = [a.loop for a in last.spatial[:rows]]
        in_group = None
        innermost_rows = last.spatial[rows - 1].extent
        if group > 1 and (innermost_rows is None or innermost_rows >= 2 * group):
            # split the innermost row axis: a group is a box of rows, whatever the batch
            row_loops[-1], in_group = sch.split(row_loops[-1], [None, group])
        row = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
        for name, stage in reversed(list(zip(names[:-1], stages[:-1]))):
            block = sch.get_block(name)
            sch.compute_at(block, row)
            if stage.reduce and in_group is not None:
                _interleave(sch, block, row)
            elif not stage.reduce and any(a.extent != 1 for a in stage.spatial[rows:]):
                _vectorize_row(sch, block, row, stage, machine, f"{name}.lanes")
            elif not stage.reduce and in_group is not None:
                # one value per row (a mean, an inverse deviation): scalars kept in registers
                # beside the group's sums, which a vector access to them would spill
                sch.unroll(sch.get_loops(block)[-1])
        if threads_decided(sch, row, last.work(), machine, f"{names[-1]}.threads"):
            sch.parallel(row)
        return sch
