"""Schedule primitives and traces on PrimFuncs (TensorIR style); see docs/schedule.md.

A `Schedule` holds a PrimFunc; its loop primitives (get_block, get_loops, split, fuse,
reorder, parallel, vectorize, unroll, bind, annotate, sampling) and block primitives
(compute_inline, reverse_compute_inline, compute_at, reverse_compute_at, cache_read,
cache_write, decompose_reduction) rewrite it without changing what it computes, refusing
with a `ScheduleError` where they would, and record themselves in a `Trace` that serializes
to JSON and replays on a fresh copy of the function. `compact_buffers` runs once on the
scheduled function: each intermediate buffer allocated where it is used, at the size used;
then `unswitch_guards` gives each tile whose split guards can be tested up front a
guard-free copy.
"""

from tcc.lower.schedule.compact import compact_buffers
from tcc.lower.schedule.schedule import Schedule
from tcc.lower.schedule.state import BlockRV, ExprRV, LoopRV, ScheduleError
from tcc.lower.schedule.trace import Instruction, Trace
from tcc.lower.schedule.unswitch import unswitch_guards

__all__ = [
    "BlockRV",
    "ExprRV",
    "Instruction",
    "LoopRV",
    "Schedule",
    "ScheduleError",
    "Trace",
    "compact_buffers",
    "unswitch_guards",
]
