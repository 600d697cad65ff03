"""The Schedule: a PrimFunc being transformed by primitives, each recorded in a trace.

Every primitive is a method marked `@instruction`. It resolves its handles to located
statements (`_block`, `_loop`, `_int`), calls a pure function of the current PrimFunc
(`loops.py`, `blocks.py`, `cache.py`, `reduction.py`, `rfactor.py`, `compute_at.py`,
`sampling.py`) that checks preconditions and returns the rewritten function, stores that
function, and records itself with `_record`, which names the handles it returns. A
primitive that raises leaves the schedule as it was. Handle and int parameters of a
primitive are its trace inputs, the others (strings, flags) its attributes, and sampling
primitives take a `decision` keyword, which is how a trace replays them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule import blocks, cache, compute_at, loops, reduction, rfactor, sampling
from tcc.lower.schedule.state import (
    BlockRV,
    ExprRV,
    Handle,
    Located,
    LoopRV,
    ScheduleError,
    child_blocks,
    find_block,
    find_loop,
    schedule_error,
    walk,
)
from tcc.lower.schedule.trace import Instruction, Ref, Trace, freeze, instruction

_PREFIX = {BlockRV: "b", LoopRV: "l", ExprRV: "v"}


def _check_loop_vars(func: T.PrimFunc) -> None:
    """Loop handles name loops by variable, so no two loops may share one."""
    seen: set[int] = set()
    for loc in walk(func.body):
        if isinstance(loc.stmt, T.For):
            if id(loc.stmt.var) in seen:
                raise ScheduleError(
                    f"schedule: loop '{loc.stmt.var.name}': its variable is bound by two loops; "
                    "give each loop its own variable"
                )
            seen.add(id(loc.stmt.var))


class Schedule:
    """A PrimFunc under scheduling; `func` is the current function, `trace` what was applied.

    `decisions` decide the sampling instructions called without a decision (by default:
    each categorical sample's default, perfect tiles drawn from a generator seeded by 0);
    `seed`, when given, makes them all drawn from a generator seeded by it, so the same seed
    and the same calls give the same function."""

    def __init__(self, func: T.PrimFunc, seed: int | None = None,
                 decisions: sampling.Decisions | None = None):
        _check_loop_vars(func)
        self._func = func
        if decisions is None:
            decisions = sampling.Decisions(sample=seed is not None, seed=seed or 0)
        self._decisions = decisions
        self._instructions: list[Instruction] = []
        self._names: dict[Handle, str] = {}
        self._counts: Counter[str] = Counter()
        self._values: dict[ExprRV, int] = {}

    @property
    def func(self) -> T.PrimFunc:
        return self._func

    def copy(self) -> Schedule:
        """A schedule at the same point that goes on independently (its decisions shared):
        a rule works on a copy and is kept only when it succeeds."""
        other = object.__new__(Schedule)
        other.__dict__.update(self.__dict__)
        other._instructions = list(self._instructions)
        other._names = dict(self._names)
        other._counts = Counter(self._counts)
        other._values = dict(self._values)
        return other

    @property
    def trace(self) -> Trace:
        return Trace(tuple(self._instructions))

    def get(self, handle: Handle) -> T.Block | T.For | int:
        """The block or loop statement, or the sampled value, a handle stands for."""
        if isinstance(handle, ExprRV):
            return self._int("get", handle)
        if isinstance(handle, BlockRV):
            return self._block("get", handle).stmt
        return self._loop("get", handle).stmt

    # -- helpers for primitives -------------------------------------------------------------

    def _check_known(self, primitive: str, handle) -> None:
        if handle not in self._names:
            raise schedule_error(
                primitive,
                str(handle),
                "this handle was not returned by this schedule; get handles with "
                "get_block/get_loops",
            )

    def _block(self, primitive: str, block: BlockRV) -> Located:
        """The located block a handle names."""
        if not isinstance(block, BlockRV):
            raise ScheduleError(f"{primitive}: expected a block handle, got {block!r}")
        self._check_known(primitive, block)
        return self._unique_block(primitive, block)

    def _unique_block(self, primitive: str, block: BlockRV) -> Located:
        found = find_block(self._func, block.name)
        if len(found) != 1:
            reason = "no such block" if not found else f"{len(found)} blocks have this name"
            raise schedule_error(primitive, str(block), reason)
        return found[0]

    def _loop(self, primitive: str, loop: LoopRV) -> Located:
        """The located loop a handle names."""
        if not isinstance(loop, LoopRV):
            raise ScheduleError(f"{primitive}: expected a loop handle, got {loop!r}")
        self._check_known(primitive, loop)
        loc = find_loop(self._func, loop.var)
        if loc is None:
            raise schedule_error(
                primitive,
                str(loop),
                "the loop is no longer in the function (split, fused or removed); use the "
                "handles that primitive returned",
            )
        return loc

    def _target(self, primitive: str, handle: BlockRV | LoopRV) -> Located:
        if isinstance(handle, BlockRV):
            return self._block(primitive, handle)
        return self._loop(primitive, handle)

    def _int(self, primitive: str, value: int | ExprRV | None) -> int | None:
        """A literal or sampled integer argument."""
        if isinstance(value, ExprRV):
            self._check_known(primitive, value)
            return self._values[value]
        return value

    def _ref(self, value):
        if isinstance(value, (BlockRV, LoopRV, ExprRV)):
            return Ref(self._names[value])
        if isinstance(value, (list, tuple)):
            return tuple(self._ref(x) for x in value)
        return value

    def _record(self, kind: str, inputs: Sequence, attrs: dict, outputs, decision=None):
        """Append an instruction to the trace, naming the handles it returns; returns `outputs`."""
        names = []
        handles = [] if outputs is None else outputs if isinstance(outputs, list) else [outputs]
        for handle in handles:
            prefix = _PREFIX[type(handle)]
            names.append(f"{prefix}{self._counts[prefix]}")
            self._counts[prefix] += 1
            self._names[handle] = names[-1]
        self._instructions.append(
            Instruction(
                kind,
                tuple(self._ref(x) for x in inputs),
                tuple((k, freeze(v)) for k, v in attrs.items()),
                tuple(names),
                freeze(decision),
            )
        )
        return outputs

    # -- getting handles --------------------------------------------------------------------

    @instruction
    def get_block(self, name: str) -> BlockRV:
        """The block called `name`."""
        handle = BlockRV(name)
        self._unique_block("get_block", handle)
        return self._record("get_block", [], {"name": name}, handle)

    @instruction
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around a block inside its enclosing block, outermost first."""
        loc = self._block("get_loops", block)
        return self._record("get_loops", [block], {}, [LoopRV(f.var) for f in loc.loops()])

    @instruction
    def get_child_blocks(self, parent: BlockRV | LoopRV) -> list[BlockRV]:
        """The blocks directly under a block or loop (not inside another block), in order."""
        loc = self._target("get_child_blocks", parent)
        body = loc.stmt.body
        children = [BlockRV(b.name) for b in child_blocks(body)]
        return self._record("get_child_blocks", [parent], {}, children)

    # -- loop primitives --------------------------------------------------------------------

    @instruction
    def split(self, loop: LoopRV, factors: Sequence[int | ExprRV | None]) -> list[LoopRV]:
        """Split a loop into a nest of loops with the given extents, outermost first; one
        factor may be None (inferred). Extents that do not divide get a guard."""
        loc = self._loop("split", loop)
        values = [self._int("split", f) for f in factors]
        self._func, new_vars = loops.split(self._func, loc, values)
        return self._record("split", [loop, list(factors)], {}, [LoopRV(v) for v in new_vars])

    @instruction
    def fuse(self, *loop_handles: LoopRV) -> LoopRV:
        """Fuse perfectly nested loops (outermost first) into one."""
        locs = [self._loop("fuse", h) for h in loop_handles]
        self._func, fused = loops.fuse(self._func, locs)
        return self._record("fuse", list(loop_handles), {}, LoopRV(fused))

    @instruction
    def add_unit_loop(self, target: BlockRV | LoopRV) -> LoopRV:
        """A new loop of one iteration right around a block or loop."""
        loc = self._target("add_unit_loop", target)
        self._func, unit = loops.add_unit_loop(self._func, loc)
        return self._record("add_unit_loop", [target], {}, LoopRV(unit))

    @instruction
    def reorder(self, *loop_handles: LoopRV) -> None:
        """Reorder loops of one perfect nest to the given order, outermost first."""
        locs = [self._loop("reorder", h) for h in loop_handles]
        self._func = loops.reorder(self._func, locs)
        self._record("reorder", list(loop_handles), {}, None)

    def _set_kind(self, primitive: str, loop: LoopRV, kind: T.ForKind, tag: str | None = None):
        loc = self._loop(primitive, loop)
        self._func = loops.set_kind(primitive, self._func, loc, kind, tag)

    @instruction
    def parallel(self, loop: LoopRV) -> None:
        """Run a loop's iterations on CPU threads; refused when they depend on each other."""
        self._set_kind("parallel", loop, T.ForKind.PARALLEL)
        self._record("parallel", [loop], {}, None)

    @instruction
    def vectorize(self, loop: LoopRV) -> None:
        """Run a loop's iterations as vector lanes; refused when they depend on each other."""
        self._set_kind("vectorize", loop, T.ForKind.VECTORIZED)
        self._record("vectorize", [loop], {}, None)

    @instruction
    def unroll(self, loop: LoopRV) -> None:
        """Unroll a loop."""
        self._set_kind("unroll", loop, T.ForKind.UNROLLED)
        self._record("unroll", [loop], {}, None)

    @instruction
    def bind(self, loop: LoopRV, thread: str) -> None:
        """Bind a loop to a GPU thread axis ("blockIdx.x", "threadIdx.y", ...)."""
        self._set_kind("bind", loop, T.ForKind.THREAD_BINDING, thread)
        self._record("bind", [loop], {"thread": thread}, None)

    @instruction
    def annotate(self, target: BlockRV | LoopRV, key: str, value) -> None:
        """Attach `key: value` to a block or loop (e.g. "pragma_auto_unroll_max_step": 16)."""
        loc = self._target("annotate", target)
        self._func = loops.annotate(self._func, loc, key, value)
        self._record("annotate", [target], {"key": key, "value": value}, None)

    # -- block primitives -------------------------------------------------------------------

    @instruction
    def compute_inline(self, block: BlockRV) -> None:
        """Inline an elementwise producer's expression into the blocks reading its buffer."""
        loc = self._block("compute_inline", block)
        self._func = blocks.compute_inline(self._func, loc)
        self._record("compute_inline", [block], {}, None)

    @instruction
    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Fold an elementwise consumer into the one block producing what it reads."""
        loc = self._block("reverse_compute_inline", block)
        self._func = blocks.reverse_compute_inline(self._func, loc)
        self._record("reverse_compute_inline", [block], {}, None)

    @instruction
    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False) -> None:
        """Move a producer under a loop of its consumers, computing per iteration the part
        of its buffer they read there."""
        block_loc = self._block("compute_at", block)
        loop_loc = self._loop("compute_at", loop)
        self._func = compute_at.compute_at(self._func, block_loc, loop_loc, preserve_unit_loops)
        attrs = {"preserve_unit_loops": preserve_unit_loops}
        self._record("compute_at", [block, loop], attrs, None)

    @instruction
    def reverse_compute_at(
        self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False
    ) -> None:
        """Move a consumer under a loop of its producers, consuming per iteration the part
        of their buffer written there."""
        block_loc = self._block("reverse_compute_at", block)
        loop_loc = self._loop("reverse_compute_at", loop)
        self._func = compute_at.reverse_compute_at(
            self._func, block_loc, loop_loc, preserve_unit_loops
        )
        attrs = {"preserve_unit_loops": preserve_unit_loops}
        self._record("reverse_compute_at", [block, loop], attrs, None)

    @instruction
    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str) -> BlockRV:
        """Copy a buffer the block reads into a new `storage_scope` buffer before its loop
        nest and read the copy; returns the copying block."""
        loc = self._block("cache_read", block)
        self._func, name = cache.cache_read(self._func, loc, read_buffer_index, storage_scope)
        attrs = {"storage_scope": storage_scope}
        return self._record("cache_read", [block, read_buffer_index], attrs, BlockRV(name))

    @instruction
    def cache_write(self, block: BlockRV, write_buffer_index: int, storage_scope: str) -> BlockRV:
        """Write into a new `storage_scope` buffer, copied back after the block's loop nest;
        returns the copying block."""
        loc = self._block("cache_write", block)
        self._func, name = cache.cache_write(self._func, loc, write_buffer_index, storage_scope)
        attrs = {"storage_scope": storage_scope}
        return self._record("cache_write", [block, write_buffer_index], attrs, BlockRV(name))

    @instruction
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Split a reduction's init into its own block, placed before `loop`; returns it."""
        block_loc = self._block("decompose_reduction", block)
        loop_loc = self._loop("decompose_reduction", loop)
        self._func, name = reduction.decompose_reduction(self._func, block_loc, loop_loc)
        return self._record("decompose_reduction", [block, loop], {}, BlockRV(name))

    @instruction
    def rfactor(self, block: BlockRV, loop: LoopRV, regroup: bool = False,
                storage_scope: str | None = None) -> BlockRV:
        """Keep one partial result of a reduction per iteration of `loop`, combined by the
        block after its loop nest; returns the block computing the partial results.
        `regroup` allows a float sum or product (whose rounding then changes);
        `storage_scope` places the partial results ("shared": a GPU block's threads')."""
        block_loc = self._block("rfactor", block)
        loop_loc = self._loop("rfactor", loop)
        self._func, name = rfactor.rfactor(self._func, block_loc, loop_loc, regroup, storage_scope)
        attrs = {**({"regroup": True} if regroup else {}),
                 **({"storage_scope": storage_scope} if storage_scope is not None else {})}
        return self._record("rfactor", [block, loop], attrs, BlockRV(name))

    # -- sampling ---------------------------------------------------------------------------

    @instruction
    def sample_perfect_tile(
        self,
        loop: LoopRV,
        n: int,
        max_innermost_factor: int = 16,
        decision: Sequence[int] | None = None,
    ) -> list[ExprRV]:
        """`n` factors whose product is the loop's (constant) extent, the innermost at most
        `max_innermost_factor`; drawn uniformly, or `decision` when given."""
        loc = self._loop("sample_perfect_tile", loop)
        extent = loc.stmt.extent
        if not isinstance(extent, E.IntImm):
            raise schedule_error(
                "sample_perfect_tile",
                str(loop),
                f"extent {extent} is not a constant; split symbolic loops by fixed factors",
            )
        tiles = sampling.sample_perfect_tile(
            self._decisions.rng, str(loop), extent.value, n, max_innermost_factor,
            decision,
        )
        handles = [ExprRV(f"{loop.var.name}_tile{k}") for k in range(n)]
        self._values.update(zip(handles, tiles))
        attrs = {"n": n, "max_innermost_factor": max_innermost_factor}
        return self._record("sample_perfect_tile", [loop], attrs, handles, list(tiles))

    @instruction
    def sample_categorical(
        self,
        candidates: Sequence[int],
        probs: Sequence[float],
        decision: int | None = None,
        default: int = 0,
        label: str = "",
    ) -> ExprRV:
        """One of `candidates`: the one at index `decision` when given, else as the
        schedule's decisions say (for `label`; else index `default`, or drawn with
        probabilities `probs` when the schedule samples)."""
        if decision is None:
            decision = self._decisions.categorical(label, candidates, probs, default)
        index = sampling.sample_categorical(
            self._decisions.rng, candidates, probs, decision, default
        )
        handle = ExprRV("categorical")
        self._values[handle] = candidates[index]
        attrs = {"candidates": list(candidates), "probs": list(probs), "default": default,
                 "label": label}
        return self._record("sample_categorical", [], attrs, handle, index)
