"""compute_at and reverse_compute_at: move a block into the loop nest of the block that
consumes (or produces) its buffer, computing per iteration of the target loop only the part
that iteration needs (or has just made).

The part is a box of the buffer (`regions.py`): the accesses of the blocks under the loop,
stated in loop variables, with the loops inside the target loop relaxed over their ranges.
The moved block gets a fresh loop nest over that box, outermost first in the order of its
iteration variables (a loop of extent 1 is left out unless `preserve_unit_loops`), each
variable bound to the box's first index plus its loop variable; reduction variables keep
their full range. Where the box may leave the block's iteration domain (a guarded split, a
stencil at the border) a predicate keeps it inside.

compute_at puts the producer first in the loop's body; every reader of its buffer must be
under the loop, so nothing else sees the elements it no longer computes up front.
reverse_compute_at puts the consumer last in the loop's body; every writer of the buffer it
reads must be under the loop, each iteration writing a box without gaps with any reduction
finished inside it, so the consumer only reads finished elements. Both refuse when a block
in between touches what the moved block reads or writes.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.blocks import (
    element_dims,
    error,
    is_param,
    is_reduction,
    plain_indices,
    require_scope,
)
from tcc.lower.schedule.rewrite import conjunction, map_blocks
from tcc.lower.schedule.scope import (
    Scope,
    common_loops,
    enclosing_block,
    read_buffers,
    reads,
    under,
    writes,
)
from tcc.lower.schedule.state import Located, find_loop, replace


def _check_target(primitive: str, scope: Scope, block_loc: Located, loop_loc: Located) -> None:
    block = block_loc.stmt
    parent = enclosing_block(loop_loc)
    if parent is None or parent.stmt is not scope.parent.stmt:
        raise error(
            primitive, block, f"loop '{loop_loc.stmt.var.name}' is not in the block's scope"
        )
    if under(block_loc, loop_loc.stmt):
        raise error(primitive, block, f"it is already under loop '{loop_loc.stmt.var.name}'")


def _inner_loops(loc: Located, loop: T.For) -> list[T.For]:
    """The loops between `loop` and a located block under it."""
    loops = loc.loops()
    return loops[next(k for k, f in enumerate(loops) if f is loop) + 1 :]


def _bindings(block: T.Block) -> dict:
    return {iv.var: iv.binding for iv in block.iter_vars}


def _rebuilt(
    block: T.Block, dims: dict[int, int], box: R.Box, outer: list[T.For], preserve: bool
) -> T.Stmt:
    """The block in a fresh loop nest over `box` (`dims`: iteration variable id -> buffer
    dimension), guarded where `outer` loops can take the box out of its domain."""
    ranges = R.loop_ranges(outer)
    ivs, loops, conds = [], [], []
    for iv in block.iter_vars:
        d = dims.get(id(iv.var))
        lo, ext = (E.const(0), iv.extent) if d is None else (box.mins[d], box.extents[d])
        binding: E.PrimExpr = lo
        if preserve or R.const_value(ext) != 1:
            var = E.Var(iv.var.name.removeprefix("v_"), iv.var.dtype)
            loops.append((var, ext))
            binding = lo + var
        ivs.append(dataclasses.replace(iv, binding=E.simplify(binding)))
        if d is not None:
            conds += _outside(binding, lo, ext, iv.extent, ranges)
    stmt: T.Stmt = dataclasses.replace(block, iter_vars=tuple(ivs))
    if conds:
        stmt = T.IfThenElse(conjunction(conds), stmt)
    for var, ext in reversed(loops):
        stmt = T.For(var, E.const(0, var.dtype), E.const(ext), T.ForKind.SERIAL, stmt)
    return stmt


def _outside(binding, lo, ext, extent, ranges) -> list[E.PrimExpr]:
    """Conditions keeping `binding` in [0, extent) where the box may leave it."""
    low = R.bounds(lo, ranges)
    high = R.bounds(E.simplify(lo + ext - 1), ranges)
    conds = []
    if not _at_least(None if low is None else low[0], 0):
        conds.append(E.Cmp("ge", binding, E.const(0, binding.dtype)))
    if not _at_least(None if high is None else E.simplify(extent - high[1]), 1):
        conds.append(E.Cmp("lt", binding, E.const(extent, binding.dtype)))
    return conds


def _at_least(e: E.PrimExpr | None, n: int) -> bool:
    """Whether `e` is provably at least `n` (a constant that is)."""
    value = None if e is None else R.const_value(e)
    return value is not None and value >= n


def _moved(func: T.PrimFunc, block: T.Block, loop: T.For, nest: T.Stmt, first: bool):
    """The function with `block` removed from where it was and `nest` put first (or last)
    in `loop`'s body."""
    func = dataclasses.replace(
        func, body=map_blocks(func.body, lambda b: None if b is block else b)
    )
    loc = find_loop(func, loop.var)
    body = T.seq(nest, loc.stmt.body) if first else T.seq(loc.stmt.body, nest)
    return replace(func, loc, dataclasses.replace(loc.stmt, body=body))


def _stays_before(a: Located, b: Located, c: Located) -> bool:
    """Whether `a`, before `b`, stays before `c` in every iteration of the loops around
    both `a` and `b`."""
    return all(under(c, f) or c.stmt is f for f in common_loops(a, b))


# ---------------------------------------------------------------------------------------------
# compute_at


def _output(primitive: str, func: T.PrimFunc, block: T.Block) -> tuple[T.Buffer, list]:
    """The one buffer a block writes, an element per spatial iteration, and the iteration
    variable indexing each dimension."""
    if len(block.writes) != 1:
        raise error(primitive, block, f"it writes {len(block.writes)} buffers, not one")
    region = block.writes[0]
    if not all(R.const_value(ext) == 1 for _, ext in region.ranges):
        raise error(
            primitive, block, f"it writes a range of '{region.buffer.name}', not one element"
        )
    index_vars = plain_indices(primitive, block, region.buffer, [lo for lo, _ in region.ranges])
    spatial = [iv.var for iv in block.iter_vars if iv.kind is T.IterKind.SPATIAL]
    if len(index_vars) != len(spatial):
        raise error(
            primitive,
            block,
            f"some spatial variable does not index '{region.buffer.name}', so "
            "its iterations overwrite one another",
        )
    if is_param(func, region.buffer):
        raise error(
            primitive,
            block,
            f"it writes '{region.buffer.name}', a parameter of the function, "
            "which must be written whole",
        )
    return region.buffer, index_vars


def compute_at(
    func: T.PrimFunc, block_loc: Located, loop_loc: Located, preserve_unit_loops: bool
) -> T.PrimFunc:
    """Move a producer into `loop`, computing per iteration what the consumers under the
    loop read."""
    block: T.Block = block_loc.stmt
    loop: T.For = loop_loc.stmt
    scope = require_scope("compute_at", func, block_loc)
    _check_target("compute_at", scope, block_loc, loop_loc)
    buf, index_vars = _output("compute_at", func, block)
    other = next((w for w in scope.writers(buf) if w.stmt is not block), None)
    if other is not None:
        raise error("compute_at", block, f"block '{other.stmt.name}' also writes '{buf.name}'")
    consumers = [r for r in scope.readers(buf) if r.stmt is not block]
    if not consumers:
        raise error(
            "compute_at", block, f"no block under loop '{loop.var.name}' reads '{buf.name}'"
        )
    for r in consumers:
        if not under(r, loop):
            raise error(
                "compute_at",
                block,
                f"block '{r.stmt.name}' outside loop '{loop.var.name}' reads '{buf.name}'",
            )
        if scope.position(r.stmt) < scope.position(block):
            raise error("compute_at", block, f"block '{r.stmt.name}' reads '{buf.name}' before it")
    inputs = reads(block)
    for w in scope.members:
        if w.stmt is block or not writes(w.stmt) & inputs:
            continue
        before = scope.position(w.stmt) < scope.position(block)
        if not (before and _stays_before(w, block_loc, loop_loc)):
            raise error(
                "compute_at",
                block,
                f"block '{w.stmt.name}' writes what it reads, and would no longer run before it",
            )
    accesses = []
    ranges = {}
    for r in consumers:
        declared = [x for x in r.stmt.reads if x.buffer is buf]
        if not declared:
            raise error(
                "compute_at",
                block,
                f"block '{r.stmt.name}' reads '{buf.name}' without declaring the region",
            )
        accesses += [R.access_in_loops(r.stmt, x, _bindings(r.stmt)) for x in declared]
        ranges.update(R.loop_ranges(_inner_loops(r, loop)))
    box = R.box(accesses, ranges)
    if box is None:
        raise error(
            "compute_at",
            block,
            f"the region of '{buf.name}' its consumers read cannot be "
            "bounded (an index is not affine in the loops)",
        )
    dims = {id(v): d for d, v in enumerate(index_vars)}
    nest = _rebuilt(block, dims, box, [*loop_loc.loops(), loop], preserve_unit_loops)
    return _moved(func, block, loop, nest, first=True)


# ---------------------------------------------------------------------------------------------
# reverse_compute_at


def _input(scope: Scope, loc: Located, loop: T.For) -> tuple[T.Buffer, list[Located]]:
    """The buffer the consumer reads that blocks under `loop` write, and its writers."""
    block = loc.stmt
    produced = {}
    for b in read_buffers(block).values():
        writers = scope.writers(b)
        if any(under(w, loop) for w in writers):
            produced[b.name] = (b, writers)
    if len(produced) != 1:
        what = "no buffer" if not produced else f"{len(produced)} buffers ({', '.join(produced)})"
        raise error(
            "reverse_compute_at",
            block,
            f"it reads {what} written under loop '{loop.var.name}'; it must read exactly one",
        )
    ((buf, writers),) = produced.values()
    outside = next((w for w in writers if not under(w, loop)), None)
    if outside is not None:
        raise error(
            "reverse_compute_at",
            block,
            f"block '{outside.stmt.name}' outside loop '{loop.var.name}' also writes '{buf.name}'",
        )
    return buf, writers


def _consumer_dims(block: T.Block, buf: T.Buffer) -> dict[int, int]:
    """Iteration variable id -> the dimension of `buf` it indexes, from the one element of
    `buf` each iteration reads; variables indexing none keep their whole range."""
    regions = {tuple(lo for lo, _ in r.ranges) for r in block.reads if r.buffer is buf}
    loads = {ld.indices for ld in R.iter_loads((block.init, block.body)) if ld.buffer is buf}
    if len(regions | loads) != 1:
        raise error(
            "reverse_compute_at",
            block,
            f"it reads '{buf.name}' at more than one place; it must read one element per iteration",
        )
    (indices,) = regions | loads
    return element_dims("reverse_compute_at", block, buf, indices, whole=False)


def _written_box(buf: T.Buffer, writers: list[Located], loop_loc: Located, block: T.Block):
    """The box of `buf` one iteration of the loop writes; refused unless every writer's
    part is that whole box, with no gaps and its reduction finished."""
    loop = loop_loc.stmt
    found: R.Box | None = None
    for w in writers:
        inner = _inner_loops(w, loop)
        bindings = _bindings(w.stmt)
        outer = {id(f.var) for f in w.loops()} - {id(f.var) for f in inner}
        for iv in w.stmt.iter_vars:
            used = {id(v) for v in E.free_vars(iv.binding)}
            if iv.kind is T.IterKind.REDUCE and used & outer:
                raise error(
                    "reverse_compute_at",
                    block,
                    f"block '{w.stmt.name}' reduces across "
                    f"iterations of loop '{loop.var.name}', so its elements are not final "
                    "inside one",
                )
        for r in w.stmt.writes:
            if r.buffer is not buf:
                continue
            access = R.access_in_loops(w.stmt, r, bindings)
            b = R.box([access], R.loop_ranges(inner))
            if b is None or not R.gapless(access, inner) or not _same_box(found or b, b):
                raise error(
                    "reverse_compute_at",
                    block,
                    f"what one iteration of loop "
                    f"'{loop.var.name}' writes of '{buf.name}' is not one box",
                )
            found = b
    return found


def _same_box(a: R.Box, b: R.Box) -> bool:
    return all(
        E.prove_equal(E.as_dim(x), E.as_dim(y))
        for x, y in zip(a.mins + a.extents, b.mins + b.extents)
    )


def reverse_compute_at(
    func: T.PrimFunc, block_loc: Located, loop_loc: Located, preserve_unit_loops: bool
) -> T.PrimFunc:
    """Move a consumer into `loop`, consuming per iteration what the producers under the
    loop have just written."""
    block: T.Block = block_loc.stmt
    loop: T.For = loop_loc.stmt
    scope = require_scope("reverse_compute_at", func, block_loc)
    _check_target("reverse_compute_at", scope, block_loc, loop_loc)
    if is_reduction(block):
        raise error(
            "reverse_compute_at",
            block,
            "it is a reduction; only a block without one can follow its producer into a loop",
        )
    buf, writers = _input(scope, block_loc, loop)
    dims = _consumer_dims(block, buf)
    inside = [m for m in scope.members if under(m, loop)]
    if any(scope.position(m.stmt) > scope.position(block) for m in inside):
        raise error("reverse_compute_at", block, f"it runs before loop '{loop.var.name}' ends")
    _check_reordering(scope, block_loc, loop_loc, buf, inside)
    box = _written_box(buf, writers, loop_loc, block)
    nest = _rebuilt(block, dims, box, [*loop_loc.loops(), loop], preserve_unit_loops)
    return _moved(func, block, loop, nest, first=False)


def _check_reordering(
    scope: Scope, block_loc: Located, loop_loc: Located, buf: T.Buffer, inside: list[Located]
) -> None:
    """Refuse when a block that the consumer would now run before, or inside of, writes
    what it reads (but `buf`) or uses what it writes."""
    block = block_loc.stmt
    inputs = reads(block) - {id(buf)}
    outputs = writes(block)
    first = min(scope.position(m.stmt) for m in inside)
    for x in scope.members:
        if x.stmt is block:
            continue
        if not (writes(x.stmt) & inputs or (reads(x.stmt) | writes(x.stmt)) & outputs):
            continue
        pos = scope.position(x.stmt)
        if pos < first and not under(x, loop_loc.stmt) and _stays_before(x, loop_loc, block_loc):
            continue
        if pos > scope.position(block) and _stays_before(block_loc, x, loop_loc):
            continue
        raise error(
            "reverse_compute_at",
            block,
            f"block '{x.stmt.name}' touches what it reads or "
            "writes and would no longer run in the same order",
        )
