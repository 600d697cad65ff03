"""The threads of a GPU block share one reduction: row statistics, means, norms.

Applies to canonical reduction stages that reduce a constant count of at least
`MIN_VALUES` values into each output, a count with a divisor from 32 to 1024 threads, and
whose every load reads every spatial axis: the rows of layer norm and of a softmax over a
fixed axis, a global pool, a mean, a sum of a whole tensor (one block, bound to a loop of
one iteration added around the nest). It also takes a GEMV: a contraction with one row (M = 1,
a classifier head at batch 1, a decoder's step) whose matrix operand reads every output
axis and runs along the reduction in memory (`W[n, k]`, torch's Linear layout): a block per
output reads its row of W in consecutive addresses, where one thread per output would read
a column of addresses K apart. (With a symbolic count, or one without such a divisor,
the last threads' partial results would start where no iteration sets them: rfactor
initializes those in a nest of their own, which compute_at cannot yet move under the
block's loop. Such stages stay one thread per output.) A contraction (some load skips an
output axis, and none is a GEMV's matrix: matmul, convolution) is left to the rules for
those; one output element per thread suits it better than one block per element.

Each output element gets a block of T threads (`<stage>.reduce_threads`): the reduction
axes are fused and split by T, thread t sums the values t, t + T, t + 2T, ... in order
into its own slot of a partial buffer in shared memory (`rfactor(..., regroup=True,
storage_scope="shared")`); after a barrier every thread combines the T partials in order
in a register (T reads of one shared element at a time: broadcasts), and thread 0 writes
the result, with the elementwise stages after it folded into that write-back. The
barrier is `insert_barriers`' (tcc.lower.schedule.barriers), which every schedule gets.

This regroups a float sum: each output is the sum of T strided partial sums instead of
one running sum, so it rounds differently from the serial loop (within the usual float
error of a sum of that length). It is the one change of summation order among the GPU
rules, and what every GPU library does; a max or a min regroups exactly.
"""

from __future__ import annotations

from tcc.ir import expr as E
from tcc.lower.rules.analysis import canonical_stage
from tcc.lower.rules.decide import decide
from tcc.lower.rules.epilogue import fold_epilogues
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.state import child_blocks

MIN_VALUES = 64  # values reduced into each output below which one thread per output wins


def _reads_all(load, axes) -> bool:
    return all(any(E.uses(i, a.var) for i in load.indices) for a in axes)


def _reads_every_output_axis(stage) -> bool:
    spatial = [a for a in stage.spatial if a.extent != 1]
    return all(_reads_all(ld, spatial) for ld in stage.loads)


def _gemv_matrix(stage) -> bool:
    """Whether some load reads every output axis with its last index along the reduction."""
    spatial = [a for a in stage.spatial if a.extent != 1]
    return any(ld.indices and _reads_all(ld, spatial)
               and any(E.uses(ld.indices[-1], r.var) for r in stage.reduce)
               and not any(E.uses(ld.indices[-1], a.var) for a in spatial)
               for ld in stage.loads)


class CrossThreadReductionRule:
    name = "cuda-cross-thread-reduction"

    def apply(self, sch: Schedule, block: str, target) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        if stage is None or not stage.reduce or not stage.loads:
            return None
        values = 1
        for a in stage.reduce:
            values = None if values is None or a.extent is None else values * a.extent
        if values is None or values < MIN_VALUES or not (
                _reads_every_output_axis(stage) or _gemv_matrix(stage)):
            return None
        limit = min(target.max_threads_per_block, values // 2)
        options = [t for t in range(32, limit + 1) if values % t == 0]
        if not options:
            return None
        powers = [t for t in options if t & (t - 1) == 0 and t <= max(32, values // 4)]
        default = max(powers) if powers else min(options, key=lambda t: abs(t - 256))
        threads = decide(sch, f"{block}.reduce_threads", options, default)
        reduce = [a.loop for a in stage.reduce]
        fused = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        steps, lanes = sch.split(fused, [None, threads])
        sch.reorder(lanes, steps)  # rfactor keeps a partial per iteration of the outer loop
        partial = sch.rfactor(sch.get_block(block), lanes, regroup=True, storage_scope="shared")
        combine = sch.get_block(block)
        # (a reduction into a scalar: its one block is a loop of one iteration)
        outputs = (sch.get_loops(combine)[:len(stage.spatial)]
                   or [sch.add_unit_loop(sch.get_loops(combine)[0])])
        rows = sch.fuse(*outputs) if len(outputs) > 1 else outputs[0]
        sch.bind(rows, "blockIdx.x")
        sch.compute_at(partial, rows)
        steps, lanes = sch.get_loops(partial)[-2:]  # compute_at rebuilds them in split order
        sch.reorder(lanes, steps)
        sch.bind(lanes, "threadIdx.x")
        # every thread combines the partials (reads of one shared element are broadcasts)
        # into a register; the first alone writes the result, and the epilogue
        stages = [b.name for b in child_blocks(sch.func.body)]
        write_back = sch.cache_write(sch.get_block(block), 0, "local")
        sch.reverse_compute_at(write_back, rows, preserve_unit_loops=True)
        written = sch.get_loops(write_back)[1:] or [sch.add_unit_loop(write_back)]
        sch.bind(written[0], "threadIdx.x")
        fold_epilogues(sch, write_back, stages[stages.index(block) + 1:])
        return sch
