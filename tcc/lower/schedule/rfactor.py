"""rfactor: split a reduction into partial results kept apart along one of its loops, and
a block combining them, as a function from the current PrimFunc to the rewritten one.

A block `B` reducing into `buf[idx]` becomes two:

- `B_rf`, in B's place in its loop nest, reduces into `buf_rf[idx, k]`, where `k` is the
  chosen loop's variable, now a spatial iteration variable: each iteration of that loop
  keeps a partial result of its own, so the loop may run as vector lanes or on threads;
- `B`, in a loop nest of its own right after, combines `buf_rf[idx, 0 .. n-1]` in order
  into `buf[idx]`.

That regroups the reduction, so it is allowed only where the result cannot depend on the
grouping: `min` and `max` of any type (the backend's are NaN-propagating and order -0 below
+0, so they are exactly associative and commutative) and integer `add` and `mul` (two's
complement). A float sum or product is refused, since regrouping changes its rounding,
unless the caller asks for `regroup`: the GPU's cross-thread reductions do, the one
documented change of summation order among the default rules (docs/schedule.md). The
partial results live in a buffer of the output's scope, or of `storage_scope` ("shared"
for partials that the threads of a GPU block combine).
The chosen loop must start at 0, have a constant extent and drive reduction variables
only; each loop around the block drives spatial variables or reduction variables, not
both; no other block of the same loop nest may read the result before it is combined.
Where a predicate skips iterations of the chosen loop (the guarded last tile of a split
that does not divide), some partial results would never be set, so a third block sets them
all to the init value before the nest instead (`B_rf_init`), and `B_rf` has no init.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import is_int
from tcc.ir.printer import format_expr
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.blocks import error, merged, require_scope, single_store
from tcc.lower.schedule.cache import STORAGE_SCOPES, fresh_buffer_name, top_level
from tcc.lower.schedule.reduction import feeding_kinds
from tcc.lower.schedule.regions import iter_loads, point_region
from tcc.lower.schedule.rewrite import substitute_expr, substitute_stmt
from tcc.lower.schedule.scope import unique_name
from tcc.lower.schedule.state import Located, find_block, replace

# Combiners whose result does not depend on how the operands are grouped, per dtype class.
_EXACT_ANY = ("min", "max")
_EXACT_INT = ("add", "mul")


def exact_combiner(block: T.Block, regroup: bool = False) -> str | None:
    """The op of a reduction block whose update is `buf[idx] = op(buf[idx], value)` (either
    operand order) with an op that regroups exactly (or, with `regroup`, a float add or
    mul too); None for any other block."""
    store = block.body
    if block.init is None or not isinstance(store, T.BufferStore):
        return None
    value = store.value
    if not isinstance(value, E.BinOp):
        return None
    if value.op not in _EXACT_ANY and not (value.op in _EXACT_INT and (regroup or is_int(value.dtype))):
        return None
    if _update_operand(store) is None:
        return None
    return value.op


def _is_self_load(e, store: T.BufferStore) -> bool:
    return (
        isinstance(e, E.BufferLoad)
        and e.buffer is store.buffer
        and len(e.indices) == len(store.indices)
        and all(a is b or a == b for a, b in zip(e.indices, store.indices))
    )


def _update_operand(store: T.BufferStore) -> E.PrimExpr | None:
    """The value folded into the accumulator by `buf[idx] = op(buf[idx], value)`, provided
    it does not read `buf` itself."""
    a, b = store.value.a, store.value.b
    if _is_self_load(b, store):
        a, b = b, a
    if not _is_self_load(a, store):
        return None
    if any(ld.buffer is store.buffer for ld in iter_loads(b)):
        return None
    return b


def _check_loops(block: T.Block, loops: list[T.For], loop: T.For) -> list[T.For]:
    """The loops driving reduction variables (among them `loop`), after checking the
    preconditions on loops."""
    for f in loops:
        if feeding_kinds(block, f.var) == {T.IterKind.SPATIAL, T.IterKind.REDUCE}:
            raise error(
                "rfactor", block,
                f"loop '{f.var.name}' drives both spatial and reduction variables; "
                "split it apart first",
            )
    if feeding_kinds(block, loop.var) != {T.IterKind.REDUCE}:
        raise error("rfactor", block,
                    f"loop '{loop.var.name}' drives no reduction variable of it")
    if R.const_value(loop.min) != 0 or R.const_value(loop.extent) is None:
        raise error(
            "rfactor", block,
            f"loop '{loop.var.name}' runs from {format_expr(loop.min)} over "
            f"{format_expr(loop.extent)}; it must start at 0 and have a constant extent",
        )
    reducing = [f for f in loops if T.IterKind.REDUCE in feeding_kinds(block, f.var)]
    inner = {id(f.var) for f in reducing}
    for f in reducing:
        if any(id(v) in inner for v in E.free_vars([f.min, f.extent])):
            raise error("rfactor", block,
                        f"the bounds of loop '{f.var.name}' depend on a reduction loop")
    return reducing


def rfactor(func: T.PrimFunc, block_loc: Located, loop_loc: Located, regroup: bool = False,
            storage_scope: str | None = None) -> tuple[T.PrimFunc, str]:
    """Make the reduction `block` keep one partial result per iteration of `loop` in a new
    buffer (block `<name>_rf`, in its place), combined into its output by the block itself
    in a loop nest right after. Returns the function and the partial block's name."""
    block: T.Block = block_loc.stmt
    loop: T.For = loop_loc.stmt
    scope = require_scope("rfactor", func, block_loc)
    store = single_store("rfactor", block)
    if storage_scope is not None and storage_scope not in STORAGE_SCOPES:
        raise error("rfactor", block, f"unknown storage scope {storage_scope!r}; use one of "
                                      f"{', '.join(STORAGE_SCOPES)}")
    op = exact_combiner(block, regroup)
    if op is None:
        raise error(
            "rfactor", block,
            f"its update `{format_expr(store.value)}` is not min, max or an integer add or "
            "mul of the value it accumulates, the reductions whose result does not depend "
            "on how they are grouped",
        )
    if not isinstance(block.init, T.BufferStore) or block.init.buffer is not store.buffer:
        raise error("rfactor", block, "its init is not one store to the buffer it reduces into")
    loops = block_loc.loops()
    if not any(f.var is loop.var for f in loops):
        raise error("rfactor", block,
                    f"loop '{loop.var.name}' is not around it in its scope")
    reducing = _check_loops(block, loops, loop)
    if any(E.uses(block.init.value, iv.var) for iv in block.iter_vars
           if iv.kind is T.IterKind.REDUCE):
        raise error("rfactor", block, "its init uses a reduction variable")
    # a predicate skipping iterations of `loop` (a guarded last tile) would leave partial
    # results unset: they are then all set to the init value before the nest instead
    skips = any(
        isinstance(parent, T.IfThenElse) and field == "then_case"
        and E.uses(parent.cond, loop.var)
        for parent, field, _ in block_loc.path[len(scope.parent.path):]
    )
    buf = store.buffer
    if len(scope.writers(buf)) != 1:
        raise error("rfactor", block,
                    f"another block also writes '{buf.name}'; its partial results would miss it")
    top = top_level(block_loc, scope)
    for r in scope.readers(buf):
        if r.stmt is not block and top_level(r, scope).stmt is top.stmt:
            raise error(
                "rfactor", block,
                f"block '{r.stmt.name}' reads '{buf.name}' in the same loop nest, before the "
                "partial results are combined",
            )

    lanes = R.const_value(loop.extent)
    partial = T.Buffer(fresh_buffer_name(scope, func, f"{buf.name}_rf"), (*buf.shape, lanes),
                       buf.dtype, storage_scope or buf.scope)
    rf_name = unique_name(f"{block.name}_rf", scope.names())

    # the partial block: B's spatial variables, one for `loop`, and one reduction variable
    # per other loop driving the reduction; B's reduction variables become expressions of them
    k = E.Var(f"v_{loop.var.name}", loop.var.dtype)
    per_loop = {f.var: (k if f is loop else E.Var(f"v_{f.var.name}", f.var.dtype))
                for f in reducing}
    spatial = [iv for iv in block.iter_vars if iv.kind is T.IterKind.SPATIAL]
    reduced = {iv.var: substitute_expr(iv.binding, per_loop)
               for iv in block.iter_vars if iv.kind is T.IterKind.REDUCE}
    rf_vars = [
        *spatial,
        *(T.IterVar(per_loop[f.var], f.extent, T.IterKind.REDUCE, f.var)
          for f in reducing if f is not loop),
        T.IterVar(k, loop.extent, T.IterKind.SPATIAL, loop.var),
    ]
    at = (*store.indices, k)
    acc = E.BufferLoad(partial, at)
    value = substitute_expr(_update_operand(store), reduced)
    rf_body = T.BufferStore(partial, E.binop(op, acc, value), at)
    rf_block = T.Block(
        rf_name,
        tuple(rf_vars),
        merged((), (point_region(ld.buffer, ld.indices) for ld in iter_loads(rf_body))),
        (point_region(partial, at),),
        rf_body,
        None if skips else T.BufferStore(partial, block.init.value, at),
    )

    def combine(fresh, j):
        idx = tuple(substitute_expr(i, fresh) for i in store.indices)
        out, part = E.BufferLoad(buf, idx), E.BufferLoad(partial, (*idx, j))
        return ((point_region(partial, part.indices),), (point_region(buf, idx),),
                T.BufferStore(buf, E.binop(op, out, part), idx),
                substitute_stmt(block.init, fresh))

    def initial(fresh, j):
        at = (*(substitute_expr(i, fresh) for i in store.indices), j)
        value = substitute_expr(block.init.value, fresh)
        return (), (point_region(partial, at),), T.BufferStore(partial, value, at), None

    func = replace(func, block_loc, rf_block)
    (rf_loc,) = find_block(func, rf_name)
    top = top_level(rf_loc, require_scope("rfactor", func, rf_loc))
    nest = [top.stmt, _per_element(block.name, spatial, loop, T.IterKind.REDUCE, combine)]
    if skips:
        name = unique_name(f"{rf_name}_init", scope.names() | {rf_name})
        nest.insert(0, _per_element(name, spatial, loop, T.IterKind.SPATIAL, initial))
    func = replace(func, top, T.seq(*nest))
    (parent,) = find_block(func, scope.parent.stmt.name)
    grown = dataclasses.replace(parent.stmt,
                                alloc_buffers=(*parent.stmt.alloc_buffers, partial))
    return replace(func, parent, grown), rf_name


def _per_element(name: str, spatial: list[T.IterVar], loop: T.For, kind: T.IterKind,
                 make) -> T.Stmt:
    """A loop nest over each spatial variable's extent and, innermost, `loop`'s extent (an
    iteration variable of `kind`), around block `name`, whose reads, writes, body and init
    `make(fresh, j)` gives from the new variables standing for the spatial ones (`fresh`,
    by the old) and the innermost one (`j`)."""
    loops = [E.Var(f"ax{n}") for n in range(len(spatial))]
    fresh = {iv.var: E.Var(iv.var.name, iv.var.dtype) for iv in spatial}
    j_loop = E.Var(f"{loop.var.name}_{'c' if kind is T.IterKind.REDUCE else 'i'}")
    j = E.Var(f"v_{j_loop.name}", loop.var.dtype)
    reads, writes, body, init = make(fresh, j)
    stmt: T.Stmt = T.Block(
        name,
        (*(T.IterVar(fresh[iv.var], iv.extent, T.IterKind.SPATIAL, v)
           for iv, v in zip(spatial, loops)),
         T.IterVar(j, loop.extent, kind, j_loop)),
        reads, writes, body, init,
    )
    stmt = T.For(j_loop, E.const(0), loop.extent, T.ForKind.SERIAL, stmt)
    for iv, v in reversed(list(zip(spatial, loops))):
        stmt = T.For(v, E.const(0), iv.extent, T.ForKind.SERIAL, stmt)
    return stmt
