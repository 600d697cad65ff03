"""One GPU thread per output element: the rule that schedules every canonical stage.

Applies to any canonical stage (spatial axes, then reduction axes). The spatial loops are
fused into one, split into blocks of `threads` threads (`<stage>.threads`, default 256,
at most the target's `max_threads_per_block`) and bound to blockIdx.x and threadIdx.x;
the last block's threads past the end do nothing (the split's guard). A reduction runs in
order inside its thread, so the result is bit-identical to the serial loop nest; it
accumulates in a register, and the elementwise stages after it are folded into its
write-back (`fold_epilogues`), so a matmul's bias and activation cost no launch. When the
output has more elements than `MAX_BLOCKS` blocks of threads cover, each block steps
through a contiguous run of them (a serial loop between the blocks and the threads), so no
launch asks for more blocks than a GPU takes along x.

A stage with one output element (a whole-tensor reduction) is left as it is: the backend
launches a statement bound to no GPU axis as one thread of one block.

This is the schedule dlight falls back to; the reduction, row and matmul rules that come
before it in a rule set win where they apply.
"""

from __future__ import annotations

from tcc.lower.rules.analysis import canonical_stage
from tcc.lower.rules.decide import decide
from tcc.lower.rules.epilogue import fold_epilogues
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.state import child_blocks

THREADS = (64, 128, 256, 512, 1024)
DEFAULT_THREADS = 256
# Blocks along x one launch may ask for (CUDA allows 2^31 - 1); past it, a grid-stride loop.
MAX_BLOCKS = 1 << 20


class ThreadPerOutputRule:
    name = "cuda-thread-per-output"

    def apply(self, sch: Schedule, block: str, target) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        if stage is None:
            return None
        spatial = [a.loop for a in stage.spatial]
        if not spatial:  # one output element (a whole-tensor reduction): one thread
            return sch
        fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        total = 1
        for a in stage.spatial:
            total = None if total is None or a.extent is None else total * a.extent
        limit = target.max_threads_per_block
        options = [t for t in THREADS if t <= limit]
        default = min(DEFAULT_THREADS, limit) if total is None else min(
            DEFAULT_THREADS, limit, max(32, 1 << (total - 1).bit_length()))
        threads = decide(sch, f"{block}.threads", sorted({*options, default}), default)
        if total is not None and total <= threads:  # one block covers it
            blocks, lanes = sch.split(fused, [1, None])
        elif total is not None and -(-total // threads) > MAX_BLOCKS:
            blocks, _, lanes = sch.split(fused, [MAX_BLOCKS, None, threads])
        else:
            blocks, lanes = sch.split(fused, [None, threads])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(lanes, "threadIdx.x")
        if stage.reduce:
            accumulate_in_registers(sch, block, lanes)
        return sch


def accumulate_in_registers(sch: Schedule, block: str, thread) -> None:
    """A thread's reduction accumulates in a local buffer (a register once compacted),
    written back after its loop with the elementwise stages after it folded in."""
    stages = [b.name for b in child_blocks(sch.func.body)]
    write_back = sch.cache_write(sch.get_block(block), 0, "local")
    sch.reverse_compute_at(write_back, thread)
    fold_epilogues(sch, write_back, stages[stages.index(block) + 1:])
