"""Compact buffers: allocate each intermediate buffer where it is used, at the size one
iteration uses (TVM's PlanAndUpdateBufferAllocationLocation + CompactBufferAllocation).

After scheduling, a buffer allocated in a block (`alloc_buffer`, usually in the root) is
often touched only under some loop: a micro-kernel's local accumulator lives inside its
tile loop, a producer computed at a consumer's loop inside that loop. `compact_buffers`
moves such a buffer's allocation into the innermost loop around all of its accesses (an
`Allocate` wrapping the loop's body) and shrinks each dimension to the box that one
iteration of that loop touches (`regions.box`, the loops inside relaxed), rebasing every
load, store and declared region by the box's first index. A 4 x 16 register tile then is
a 4 x 16 array that LLVM promotes to registers, and a buffer under a parallel loop becomes
each thread's own copy.

The allocation stays above a loop that must carry the buffer's values from one iteration
to the next: a loop feeding a reduction variable of a block that writes the buffer (it
accumulates across that loop's iterations), a vectorized or thread-bound loop (its
iterations share one body; but a GPU thread's "local" buffer goes inside its thread and
block loops, a block's "shared" buffer inside its block loops, since each has its own),
and a loop whose body reads the buffer before writing it.
Otherwise it relies on what the schedule primitives keep: each iteration writes the
elements it later reads (compute_at, reverse_compute_at, cache_read and cache_write build
exactly that). A dimension whose box is not a constant smaller than the buffer keeps its
size, unshifted. A buffer that would not have a constant size inside the loop goes into
the outermost parallel loop instead, whose iterations are threads' tasks large enough that
allocating memory in each is noise (a softmax's exps over a symbolic row length: a row
group's rows, not the whole tensor); without one it stays in its block (shrunk to what all
its accesses touch), so no other loop allocates memory per iteration. The computed result
is unchanged.

Run it once scheduling is done, on the scheduled PrimFunc, right before code generation:
the schedule primitives work on buffers allocated in blocks and do not expect the
`Allocate` statements it creates. The result of compacting twice is the result of
compacting once.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.fields import field_names
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.rewrite import map_exprs, substitute_expr, substitute_stmt
from tcc.lower.schedule.state import Located, find_block, find_loop, replace, walk

_PINNED = (T.ForKind.VECTORIZED, T.ForKind.THREAD_BINDING)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Where a buffer goes (None: stays in its block) and its new shape and offsets."""

    loop: T.For | None
    shape: tuple
    offsets: tuple[E.PrimExpr | None, ...]  # per dimension; None where nothing shifts
    threads: dict  # thread tag -> the Var the offsets use for its index (`_one_thread`)


def _common_loops(found: list[R.Access]) -> list[T.For]:
    """The loops around every access, outermost first."""
    common = list(found[0].loops)
    for a in found[1:]:
        n = 0
        while n < min(len(common), len(a.loops)) and common[n] is a.loops[n]:
            n += 1
        del common[n:]
    return common


def _carrying_loops(found: list[R.Access]) -> set[int]:
    """Loops (by variable id) that feed a reduction variable of a block writing the buffer."""
    carrying: set[int] = set()
    for a in found:
        if a.kind != "writes" or a.block is None:
            continue
        for iv in a.block.iter_vars:
            if iv.kind is T.IterKind.REDUCE:
                carrying.update(id(v) for v in E.free_vars(a.bindings[iv.var]))
    return carrying


def _writes_first(found: list[R.Access], loop: T.For) -> bool:
    """Whether the first block under `loop` to touch the buffer writes it before any read:
    it does not read it, or its init writes it."""
    first = next(a for a in found if any(f is loop for f in a.loops))
    if first.block is None:
        return first.kind == "writes"
    touches = [a for a in found if a.block is first.block]
    if not any(a.kind == "writes" for a in touches):
        return False
    init_writes = first.block.init is not None and any(
        isinstance(loc.stmt, T.BufferStore) and loc.stmt.buffer is first.buffer
        for loc in walk(first.block.init)
    )
    return init_writes or all(a.kind == "writes" for a in touches)


def _private_to(scope: str, loop: T.For) -> bool:
    """Whether each iteration of a GPU-bound loop has its own copy of a buffer of `scope`:
    a block's threads each their "local" registers, a grid's blocks each their "shared"
    memory; so the buffer may be allocated inside such a loop."""
    tag = loop.thread_tag or ""
    return (scope == "local" and tag.startswith(("threadIdx", "blockIdx"))) or (
        scope == "shared" and tag.startswith("blockIdx"))


def _candidates(found: list[R.Access]) -> list[T.For]:
    """The loops around every access that carry none of the buffer's values, outermost
    first: each may hold the allocation where the buffer is written first in it
    (`_writes_first`)."""
    carrying = _carrying_loops(found)
    candidates: list[T.For] = []
    scope = found[0].region.buffer.scope
    for loop in _common_loops(found):
        if id(loop.var) in carrying or (loop.kind in _PINNED and not _private_to(scope, loop)):
            break
        candidates.append(loop)
    return candidates


def _plan(buf: T.Buffer, found: list[R.Access]) -> _Plan | None:
    """Where `buf` goes and its shape there; None when nothing changes. It moves into a
    loop at a constant size (free to allocate per iteration); at a size known only at run
    time, into the outermost parallel loop (each iteration a thread's task, large enough
    that the allocation is noise); else it is only shrunk where it is."""
    candidates = _candidates(found)
    home = next((f for f in reversed(candidates) if _writes_first(found, f)), None)
    plan = _plan_at(buf, found, home)
    if home is not None and (plan is None or any(not isinstance(d, int) for d in plan.shape)):
        outermost = next(f for f in candidates if _writes_first(found, f))
        plan = None
        if outermost.kind is T.ForKind.PARALLEL:
            plan = _plan_at(buf, found, outermost)
        if plan is None or plan.shape == tuple(buf.shape):
            plan = _plan_at(buf, found, None)
    if plan is None or (plan.loop is None and plan.shape == tuple(buf.shape)):
        return None
    return plan


def _thread_loop(loop: T.For) -> bool:
    return loop.kind is T.ForKind.THREAD_BINDING and (loop.thread_tag or "").startswith("threadIdx")


def _one_thread(buf: T.Buffer, found: list[R.Access], depth: int) -> dict | None:
    """For a "local" buffer whose accesses all lie under threadIdx loops inside its home:
    one variable per thread axis (tag -> Var) standing for every loop bound to it, when
    each access is under a loop of every such axis, each from 0 and with one index type
    (a loop's variable is then the thread's index, the same in every loop of its axis)."""
    if buf.scope != "local":
        return None
    inner = [[f for f in a.loops[depth:] if _thread_loop(f)] for a in found]
    tags = {f.thread_tag for loops in inner for f in loops}
    if not tags or any(sorted(f.thread_tag for f in loops) != sorted(tags) for loops in inner):
        return None
    loops = [f for group in inner for f in group]
    if any(R.const_value(f.min) != 0 for f in loops):
        return None
    dtypes = {tag: {f.var.dtype for f in loops if f.thread_tag == tag} for tag in tags}
    if any(len(d) != 1 for d in dtypes.values()):
        return None
    return {tag: E.Var(tag.replace(".", "_"), next(iter(d))) for tag, d in dtypes.items()}


def _in_one_thread(found: list[R.Access], depth: int, threads: dict | None):
    """Each access's region in loop variables, the ranges of the loops to relax (all inside
    the home, except the thread loops when `threads` stands for them), and per access what
    its guards bound (`R.upper_facts`)."""
    regions, ranges, facts = [], {}, []
    for a in found:
        relaxed = list(a.loops[depth:])
        region, guards = a.in_loops, a.guards
        if threads:
            mapping = {f.var: threads[f.thread_tag] for f in relaxed if _thread_loop(f)}
            relaxed = [f for f in relaxed if not _thread_loop(f)]
            region = T.BufferRegion(region.buffer, tuple(
                (substitute_expr(lo, mapping), ext) for lo, ext in region.ranges))
            guards = tuple(substitute_expr(g, mapping) for g in guards)
        regions.append(region)
        ranges.update(R.loop_ranges(relaxed))
        facts.append(R.upper_facts(guards))
    return regions, ranges, facts


def _plan_at(buf: T.Buffer, found: list[R.Access], loop: T.For | None) -> _Plan | None:
    """The box of `buf` one iteration of `loop` touches (all of it when None) as a new
    shape and offsets; None when an index cannot be bounded. For a "local" buffer under
    its threads' loops, the box is one thread's (its index held fixed, `_one_thread`)."""
    depth = 0 if loop is None else next(k for k, f in enumerate(found[0].loops) if f is loop) + 1
    threads = _one_thread(buf, found, depth)
    regions, ranges, facts = _in_one_thread(found, depth, threads)
    # a GPU block's shared copy is sized by its guards too: a copy loop fused and split by
    # the block's threads runs a guarded last pass (`if f < 1152`), whose divisions bound
    # the box (CPU buffers are sized as before)
    box = R.box(regions, ranges, facts if buf.scope == "shared" else None)
    if box is None:
        return None
    shape, offsets = [], []
    for dim, lo, ext in zip(buf.shape, box.mins, box.extents):
        size, full = R.const_value(ext), R.const_value(E.const(dim))
        if size is not None and size > 0 and (full is None or size <= full):
            # a box as large as its dimension starts at 0 in any valid run: rebasing it on
            # its start anyway makes the index a constant where the start is the binding
            # (a batch of 1), which a register tile needs
            shape.append(size)
            offsets.append(None if R.const_value(lo) == 0 else lo)
        else:
            shape.append(dim)
            offsets.append(None)
    return _Plan(loop, tuple(shape), tuple(offsets), threads or {})


def _shift(indices: tuple, offsets: tuple) -> tuple:
    return tuple(i if o is None else E.simplify(i - o) for i, o in zip(indices, offsets))


def _rebase(node, old: T.Buffer, new: T.Buffer, offsets: tuple):
    """`node` with every load, store and region of `old` using `new`, indices shifted."""

    def load(e: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(e, E.BufferLoad) and e.buffer is old:
            return dataclasses.replace(e, buffer=new, indices=_shift(e.indices, offsets))
        return None

    return _map_stmts(map_exprs(node, load), old, new, offsets)


def _map_stmts(node, old: T.Buffer, new: T.Buffer, offsets: tuple):
    """Stores and regions of `old` redirected to `new` (expressions left as they are)."""
    if isinstance(node, tuple):
        items = tuple(_map_stmts(x, old, new, offsets) for x in node)
        return node if all(a is b for a, b in zip(items, node)) else items
    if isinstance(node, T.BufferRegion) and node.buffer is old:
        starts = _shift(tuple(lo for lo, _ in node.ranges), offsets)
        return T.BufferRegion(new, tuple((s, ext) for s, (_, ext) in zip(starts, node.ranges)))
    if not isinstance(node, T.Stmt):
        return node
    changes = {}
    for fname in field_names(node):
        value = getattr(node, fname)
        rebuilt = _map_stmts(value, old, new, offsets)
        if rebuilt is not value:
            changes[fname] = rebuilt
    if isinstance(node, T.BufferStore) and node.buffer is old:
        changes.update(buffer=new, indices=_shift(node.indices, offsets))
    return dataclasses.replace(node, **changes) if changes else node


def _thread_indices(node, threads: dict):
    """`node` with each thread-index variable of `threads` replaced, under every loop bound
    to its axis, by that loop's own variable."""
    if not threads or not isinstance(node, (T.Stmt, tuple)):
        return node
    if isinstance(node, tuple):
        items = tuple(_thread_indices(x, threads) for x in node)
        return node if all(a is b for a, b in zip(items, node)) else items
    if isinstance(node, T.For) and node.thread_tag in threads and _thread_loop(node):
        body = substitute_stmt(node.body, {threads[node.thread_tag]: node.var})
        node = node if body is node.body else dataclasses.replace(node, body=body)
    changes = {}
    for fname in field_names(node):
        value = getattr(node, fname)
        rebuilt = _thread_indices(value, threads)
        if rebuilt is not value:
            changes[fname] = rebuilt
    return dataclasses.replace(node, **changes) if changes else node


def _bindings(loc: Located) -> dict:
    return {iv.var: iv.binding for iv in loc.stmt.iter_vars}


def _compact_one(func: T.PrimFunc, block_name: str, buf: T.Buffer) -> T.PrimFunc:
    (loc,) = find_block(func, block_name)
    parent: T.Block = loc.stmt
    found = [
        a
        for part in (parent.init, parent.body)
        if part is not None
        for a in R.accesses(part, _bindings(loc))
        if a.buffer is buf
    ]
    plan = _plan(buf, found) if found else None
    if plan is None:
        return func
    new = dataclasses.replace(buf, shape=plan.shape)
    kept = tuple(b for b in parent.alloc_buffers if b is not buf)
    allocs = kept if plan.loop is not None else (*kept, new)
    rebased = _rebase(dataclasses.replace(parent, alloc_buffers=allocs), buf, new, plan.offsets)
    rebased = _thread_indices(rebased, plan.threads)
    func = replace(func, loc, rebased)
    if plan.loop is not None:
        at = find_loop(func, plan.loop.var)
        func = replace(func, at, dataclasses.replace(at.stmt, body=T.Allocate(new, at.stmt.body)))
    return func


def compact_buffers(func: T.PrimFunc) -> T.PrimFunc:
    """`func` with every buffer a block allocates moved into the innermost loop around its
    accesses and shrunk to what one iteration of that loop touches (module docstring)."""
    owners = [
        (loc.stmt.name, buf)
        for loc in walk(func.body)
        if isinstance(loc.stmt, T.Block)
        for buf in loc.stmt.alloc_buffers
    ]
    for block_name, buf in owners:
        func = _compact_one(func, block_name, buf)
    return func
