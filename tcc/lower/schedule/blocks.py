"""Inlining primitives, compute_inline and reverse_compute_inline, as functions from the
current PrimFunc to the rewritten one, and the block checks the other block primitives
(`cache.py`, `reduction.py`, `compute_at.py`) share.

Each checks what keeps the result from the regions blocks declare and the order they run in
(`scope.py`), conservatively: what it cannot show to be safe it refuses with a ScheduleError
naming the primitive, the block and the reason. A buffer that inlining leaves unused loses
its allocation.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.printer import format_expr
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.regions import iter_loads
from tcc.lower.schedule.rewrite import (
    map_blocks,
    map_exprs,
    substitute_expr,
    substitute_stmt,
)
from tcc.lower.schedule.scope import (
    Scope,
    is_param,
    read_buffers,
    reads,
    scope_of,
    writes,
)
from tcc.lower.schedule.state import (
    Located,
    ScheduleError,
    schedule_error,
)


def error(primitive: str, block: T.Block, reason: str) -> ScheduleError:
    return schedule_error(primitive, f"block '{block.name}'", reason)


def require_scope(primitive: str, func: T.PrimFunc, loc: Located) -> Scope:
    scope = scope_of(func, loc)
    if scope is None:
        raise error(primitive, loc.stmt, "it is the root block, which holds the whole function")
    return scope


def is_reduction(block: T.Block) -> bool:
    return block.init is not None or any(iv.kind is T.IterKind.REDUCE for iv in block.iter_vars)


def single_store(primitive: str, block: T.Block) -> T.BufferStore:
    """The body of a block that is one store to the one buffer it writes."""
    if len(block.writes) != 1:
        raise error(
            primitive, block, f"it writes {len(block.writes)} buffers; it must write exactly one"
        )
    body = block.body
    if not isinstance(body, T.BufferStore) or body.buffer is not block.writes[0].buffer:
        raise error(primitive, block, "its body is not a single store to the buffer it writes")
    return body


def _access_text(buffer: T.Buffer, indices) -> str:
    return f"{buffer.name}[{', '.join(format_expr(i) for i in indices)}]"


def plain_indices(primitive: str, block: T.Block, buffer: T.Buffer, indices) -> list[E.Var]:
    """`indices` when each is a distinct spatial iteration variable of `block`."""
    spatial = {id(iv.var) for iv in block.iter_vars if iv.kind is T.IterKind.SPATIAL}
    out: list[E.Var] = []
    for i in indices:
        if not isinstance(i, E.Var) or id(i) not in spatial or any(i is v for v in out):
            raise error(
                primitive,
                block,
                f"it accesses {_access_text(buffer, indices)}, whose indices are not distinct "
                "spatial iteration variables of the block",
            )
        out.append(i)
    return out


def element_dims(
    primitive: str, block: T.Block, buffer: T.Buffer, indices, whole: bool = True
) -> dict[int, int]:
    """Iteration variable (by id) -> the dimension of `buffer` it indexes, for a block whose
    iterations each read one element: each index a distinct spatial variable, or 0 on a
    dimension of size 1. With `whole`, the iterations read every element once: each
    variable runs over its dimension's extent, and those indexing nothing have extent 1."""
    dims: dict[int, int] = {}
    extents = {id(iv.var): iv.extent for iv in block.iter_vars}
    for d, (i, n) in enumerate(zip(indices, buffer.shape)):
        if R.const_value(i) == 0 and R.const_value(n) == 1:
            continue
        plain_indices(primitive, block, buffer, [i])
        covers = E.prove_equal(E.as_dim(extents[id(i)]), E.as_dim(E.const(n)))
        if id(i) in dims or (whole and not covers):
            raise error(
                primitive,
                block,
                f"it reads {_access_text(buffer, indices)}, not one element of "
                f"'{buffer.name}' per iteration covering them all",
            )
        dims[id(i)] = d
    if whole and any(k not in dims and R.const_value(ext) != 1 for k, ext in extents.items()):
        raise error(
            primitive,
            block,
            f"an iteration variable does not index '{buffer.name}', so its "
            "iterations read the same element",
        )
    return dims


def func_vars(func: T.PrimFunc) -> set[int]:
    """The size variables of a function (by id): scalar parameters and buffer dimensions."""
    found = [p for p in func.params if isinstance(p, E.Var)]
    found += E.free_vars([d for b in func.buffers for d in b.shape])
    return {id(v) for v in found}


def _without_alloc(block: T.Block, buffer: T.Buffer) -> T.Block:
    kept = tuple(b for b in block.alloc_buffers if b is not buffer)
    return (
        block
        if len(kept) == len(block.alloc_buffers)
        else dataclasses.replace(block, alloc_buffers=kept)
    )


def merged(regions, extra) -> tuple[T.BufferRegion, ...]:
    out = list(regions)
    out.extend(r for r in extra if r not in out)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# compute_inline


def compute_inline(func: T.PrimFunc, loc: Located) -> T.PrimFunc:
    """Replace every load of the buffer a block computes by the block's expression, and
    remove the block."""
    block: T.Block = loc.stmt
    scope = require_scope("compute_inline", func, loc)
    if is_reduction(block):
        raise error(
            "compute_inline",
            block,
            "it is a reduction; only a block computing each element "
            "once by one expression can be inlined",
        )
    store = single_store("compute_inline", block)
    buf = store.buffer
    index_vars = plain_indices("compute_inline", block, buf, store.indices)
    if is_param(func, buf):
        raise error(
            "compute_inline",
            block,
            f"it writes '{buf.name}', a parameter of the function, which must stay written",
        )
    allowed = {id(v) for v in index_vars} | func_vars(func)
    stray = next((v for v in E.free_vars(store.value) if id(v) not in allowed), None)
    if stray is not None:
        raise error(
            "compute_inline",
            block,
            f"its value uses {stray.name}, which is not an index of the element it stores",
        )
    _check_inlinable(scope, loc, buf)
    consumers = [r for r in scope.readers(buf) if r.stmt is not block]

    def inline(e):
        if isinstance(e, E.BufferLoad) and e.buffer is buf:
            return substitute_expr(store.value, dict(zip(index_vars, e.indices)))
        return None

    def rewrite(b: T.Block) -> T.Block | None:
        if b is block:
            return None
        if b is scope.parent.stmt:
            return _without_alloc(b, buf)
        if not any(b is c.stmt for c in consumers):
            return b
        added = [
            substitute_stmt(r, dict(zip(index_vars, ld.indices)))
            for ld in iter_loads((b.init, b.body))
            if ld.buffer is buf
            for r in block.reads
        ]
        return dataclasses.replace(map_exprs(b, inline), reads=_spliced(b.reads, buf, added))

    return dataclasses.replace(func, body=map_blocks(func.body, rewrite))


def _spliced(regions, buf: T.Buffer, added) -> tuple[T.BufferRegion, ...]:
    """`regions` with those of `buf` replaced by `added`, where the first of them was."""
    out: list[T.BufferRegion] = []
    for r in regions:
        for x in added if r.buffer is buf else [r]:
            if x not in out:
                out.append(x)
    return tuple(out)


def _check_inlinable(scope: Scope, loc: Located, buf: T.Buffer) -> None:
    """The block is the only writer of `buf`, its readers come after it, and nothing its
    expression reads changes between the block and its readers."""
    block = loc.stmt
    other = next((w for w in scope.writers(buf) if w.stmt is not block), None)
    if other is not None:
        raise error("compute_inline", block, f"block '{other.stmt.name}' also writes '{buf.name}'")
    if id(buf) in reads(block):
        raise error("compute_inline", block, f"it reads '{buf.name}', the buffer it writes")
    for r in scope.readers(buf):
        if scope.position(r.stmt) < scope.position(block):
            raise error(
                "compute_inline",
                block,
                f"block '{r.stmt.name}' reads '{buf.name}' before the block writes it",
            )
    inputs = reads(block)
    for w in scope.members:
        if w.stmt is not block and writes(w.stmt) & inputs and not scope.before(w, loc):
            raise error(
                "compute_inline",
                block,
                f"block '{w.stmt.name}' writes a buffer the block "
                "reads without running entirely before it; inlining would read it later",
            )


# ---------------------------------------------------------------------------------------------
# reverse_compute_inline


def reverse_compute_inline(func: T.PrimFunc, loc: Located) -> T.PrimFunc:
    """Fold an elementwise consumer into the one block producing what it reads: the producer
    stores the consumer's value (with the producer's value in place of each load of the one
    element it reads: swish reads it twice) straight into the consumer's buffer, and the
    consumer is removed."""
    block: T.Block = loc.stmt
    scope = require_scope("reverse_compute_inline", func, loc)
    if is_reduction(block):
        raise error(
            "reverse_compute_inline",
            block,
            "it is a reduction; only an elementwise block can be inlined into its producer",
        )
    store = single_store("reverse_compute_inline", block)
    buf, load = _produced_load(scope, block, store)
    producer = _only_producer(func, scope, loc, buf)
    pstore = single_store("reverse_compute_inline", producer.stmt)
    dims = element_dims("reverse_compute_inline", block, buf, load.indices)
    by_id = {id(iv.var): iv.var for iv in block.iter_vars}
    mapping = {v: E.const(0, v.dtype) for v in by_id.values()}
    mapping.update({by_id[k]: pstore.indices[d] for k, d in dims.items()})

    def fold(e):
        if isinstance(e, E.BufferLoad) and e.buffer is buf:
            return pstore.value
        return None

    value = substitute_expr(map_exprs(store.value, fold), mapping)
    indices = tuple(substitute_expr(i, mapping) for i in store.indices)
    others = [substitute_stmt(r, mapping) for r in block.reads if r.buffer is not buf]
    p = producer.stmt
    new_producer = dataclasses.replace(
        p,
        body=T.BufferStore(store.buffer, value, indices),
        reads=merged(p.reads, others),
        writes=tuple(substitute_stmt(r, mapping) for r in block.writes),
    )

    def rewrite(b: T.Block) -> T.Block | None:
        if b is block:
            return None
        if b is p:
            return new_producer
        if b is scope.parent.stmt:
            return _without_alloc(b, buf)
        return b

    return dataclasses.replace(func, body=map_blocks(func.body, rewrite))


def _produced_load(scope: Scope, block: T.Block, store: T.BufferStore):
    """The buffer another block of the scope writes that the consumer reads, and its one
    load, at the consumer's iteration variables, covering the buffer."""
    written = {b for loc in scope.members if loc.stmt is not block for b in writes(loc.stmt)}
    loads = [ld for ld in iter_loads(store) if id(ld.buffer) in written]
    names = sorted({ld.buffer.name for ld in loads})
    if len(names) != 1:
        what = "no buffer" if not names else f"{len(names)} buffers ({', '.join(names)})"
        raise error(
            "reverse_compute_inline",
            block,
            f"it reads {what} that other blocks write; it must read exactly one producer's buffer",
        )
    load = loads[0]
    if any(tuple(other.indices) != tuple(load.indices) for other in loads[1:]):
        raise error(
            "reverse_compute_inline",
            block,
            f"it reads '{names[0]}' at {len(loads)} places; it must read one element of its "
            "producer's (as often as it likes)",
        )
    element_dims("reverse_compute_inline", block, load.buffer, load.indices)
    return load.buffer, load


def _only_producer(func: T.PrimFunc, scope: Scope, loc: Located, buf: T.Buffer) -> Located:
    """The single elementwise block writing `buf`, with nothing else in the way."""
    block = loc.stmt
    primitive = "reverse_compute_inline"
    writers = scope.writers(buf)
    if len(writers) != 1:
        raise error(primitive, block, f"{len(writers)} blocks write '{buf.name}'")
    (producer,) = writers
    if is_param(func, buf):
        raise error(
            primitive,
            block,
            f"it reads '{buf.name}', a parameter of the function, which must stay written",
        )
    if is_reduction(producer.stmt):
        raise error(
            primitive,
            block,
            f"its producer '{producer.stmt.name}' is a reduction, whose "
            "element is final only after its last update; use cache_write and inline into "
            "the write-back block",
        )
    reader = next((r for r in scope.readers(buf) if r.stmt is not block), None)
    if reader is not None:
        raise error(primitive, block, f"block '{reader.stmt.name}' also reads '{buf.name}'")
    if scope.position(producer.stmt) > scope.position(block):
        raise error(primitive, block, f"its producer '{producer.stmt.name}' runs after it")
    out = block.writes[0].buffer
    if id(out) in reads(producer.stmt) | writes(producer.stmt):
        raise error(primitive, block, f"its producer '{producer.stmt.name}' uses '{out.name}'")
    inputs = {k: b.name for k, b in read_buffers(block).items() if b is not buf}
    _check_order(primitive, scope, producer, loc, inputs, out)
    return producer


def _check_order(
    primitive: str, scope: Scope, first: Located, last: Located, inputs: dict, out: T.Buffer
) -> None:
    """Refuse when a block that is neither entirely before `first` nor entirely after `last`
    writes one of `inputs` or uses `out`: moving work from `last` to `first` would change
    what it sees."""
    for loc in scope.members:
        if loc.stmt is first.stmt or loc.stmt is last.stmt:
            continue
        hit = next((inputs[b] for b in writes(loc.stmt) if b in inputs), None)
        if hit is None and id(out) in writes(loc.stmt) | reads(loc.stmt):
            hit = out.name
        if hit is None or scope.before(loc, first) or scope.before(last, loc):
            continue
        raise error(
            primitive,
            last.stmt,
            f"block '{loc.stmt.name}' uses '{hit}' between '{first.stmt.name}' and the block",
        )
