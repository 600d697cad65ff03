"""Loop primitives: split, fuse, reorder, a unit loop added, loop kinds (parallel, vectorize,
unroll, bind) and annotations, as functions from the current PrimFunc to the rewritten one.

Each checks its preconditions and raises a ScheduleError naming the primitive, the loop and
the reason rather than change what the function computes. Blocks are untouched except for
their bindings: when split or fuse replaces loop variables, each binding gets the old
variable's value in the new ones (simplified), so the blocks still visit the same
iterations. A split whose factors overshoot the extent guards the blocks under it with a
predicate (an `IfThenElse` right around each block), so it stays correct for any extent,
symbolic ones included.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule.dependence import carried_dependence
from tcc.lower.schedule.rewrite import guard, substitute_stmt
from tcc.lower.schedule.state import Located, ScheduleError, replace, schedule_error, walk

THREAD_TAGS = frozenset(f"{axis}.{d}" for axis in ("blockIdx", "threadIdx") for d in "xyz")
ANNOTATION_TYPES = (bool, int, float, str)


def _where(loop: T.For) -> str:
    return f"loop '{loop.var.name}'"


def _error(primitive: str, loop: T.For, reason: str) -> ScheduleError:
    return schedule_error(primitive, _where(loop), reason)


def _require_plain(primitive: str, loop: T.For) -> None:
    """Restructuring applies to serial loops without annotations, which it could not keep."""
    if loop.kind is not T.ForKind.SERIAL:
        raise _error(
            primitive,
            loop,
            f"it is {loop.kind.value}, not serial; {primitive} loops before setting their kind",
        )
    if loop.annotations:
        raise _error(
            primitive, loop, f"it has annotations; {primitive} loops before annotating them"
        )


def _depends_on(e: E.PrimExpr, loops) -> T.For | None:
    """The first of `loops` whose variable `e` uses."""
    used = {id(v) for v in E.free_vars(e)}
    return next((loop for loop in loops if id(loop.var) in used), None)


def _product(dims) -> E.Dim:
    total: E.Dim = 1
    for d in dims:
        total = E.as_dim(E.binop("mul", E.const(total), E.const(d)))
    return total


# ---------------------------------------------------------------------------------------------
# split


def _split_extents(loop: T.For, factors: list[int | None]) -> list[E.Dim]:
    """The extents of the new loops: the factors, a None inferred as the rounded-up rest."""
    if len(factors) < 2:
        raise _error("split", loop, f"needs at least two factors, got {len(factors)}")
    if sum(f is None for f in factors) > 1:
        raise _error("split", loop, "more than one factor is None; at most one can be inferred")
    for f in factors:
        if f is not None and (not isinstance(f, int) or f < 1):
            raise _error("split", loop, f"factor {f!r} is not a positive integer")
    extent = E.as_dim(loop.extent)
    known = _product(f for f in factors if f is not None)
    if None in factors:
        rest = E.as_dim(E.binop("floordiv", E.const(extent) + (known - 1), known))
        return [rest if f is None else f for f in factors]
    if isinstance(extent, int) and known < extent:
        raise _error(
            "split",
            loop,
            f"the factors multiply to {known}, less than the extent {extent}; "
            "make one factor None to infer it",
        )
    if not isinstance(extent, int) and not E.prove_equal(known, extent):
        raise _error(
            "split",
            loop,
            f"the factors multiply to {known}, not provably the extent {extent}; "
            "make one factor None to infer it",
        )
    return list(factors)


def split(func: T.PrimFunc, loc: Located, factors: list[int | None]) -> tuple[T.PrimFunc, list]:
    """Replace a loop by a nest of loops of the given extents, outermost first; returns the
    function and the new loop variables."""
    loop: T.For = loc.stmt
    _require_plain("split", loop)
    extents = _split_extents(loop, factors)
    dtype = loop.var.dtype
    new_vars = [E.Var(f"{loop.var.name}_{k}", dtype) for k in range(len(extents))]
    value: E.PrimExpr = E.const(0, dtype)
    for v, e in zip(new_vars, extents):
        value = value * E.const(e, dtype) + v
    body = substitute_stmt(loop.body, {loop.var: loop.min + value})
    extent = E.as_dim(loop.extent)
    if not E.prove_equal(_product(extents), extent):
        body = guard(body, E.Cmp("lt", value, E.const(extent, dtype)))
    for v, e in reversed(list(zip(new_vars, extents))):
        body = T.For(v, E.const(0, dtype), E.const(e, dtype), T.ForKind.SERIAL, body)
    return replace(func, loc, body), new_vars


# ---------------------------------------------------------------------------------------------
# fuse


def _iter_kinds(loop: T.For, var: E.Var) -> set[T.IterKind]:
    """The kinds of the block iteration variables under `loop` whose binding uses `var`."""
    kinds = set()
    for loc in walk(loop.body):
        if isinstance(loc.stmt, T.Block):
            for iv in loc.stmt.iter_vars:
                if E.uses(iv.binding, var):
                    kinds.add(iv.kind)
    return kinds


def _check_fusible(locs: list[Located]) -> None:
    loops = [loc.stmt for loc in locs]
    if len(loops) < 2:
        raise ScheduleError(f"fuse: needs at least two adjacent loops, got {len(loops)}")
    for outer, inner in zip(loops, loops[1:]):
        if outer.body is not inner:
            raise _error(
                "fuse",
                inner,
                f"it is not the only statement in loop '{outer.var.name}'; fuse takes "
                "perfectly nested loops, outermost first",
            )
    for k, loop in enumerate(loops):
        _require_plain("fuse", loop)
        if loop.var.dtype != loops[0].var.dtype:
            raise _error(
                "fuse", loop, f"its variable is {loop.var.dtype}, not {loops[0].var.dtype}"
            )
        outer = _depends_on(E.binop("add", loop.min, loop.extent), loops[:k])
        if outer is not None:
            raise _error("fuse", loop, f"its bounds depend on loop '{outer.var.name}'")
    kinds = {loop.var.name: _iter_kinds(loops[0], loop.var) for loop in loops}
    spatial = [n for n, k in kinds.items() if T.IterKind.SPATIAL in k]
    reduce = [n for n, k in kinds.items() if T.IterKind.REDUCE in k]
    if spatial and reduce:
        raise ScheduleError(
            f"fuse: loop '{reduce[0]}': it runs a reduction while loop '{spatial[0]}' runs "
            "spatial iterations; fuse spatial loops and reduction loops separately"
        )


def fuse(func: T.PrimFunc, locs: list[Located]) -> tuple[T.PrimFunc, E.Var]:
    """Replace perfectly nested loops (outermost first) by one loop over their product."""
    _check_fusible(locs)
    loops: list[T.For] = [loc.stmt for loc in locs]
    dtype = loops[0].var.dtype
    fused = E.Var("_".join(loop.var.name for loop in loops) + "_fused", dtype)
    mapping: dict = {}
    stride: E.Dim = 1
    for k in range(len(loops) - 1, -1, -1):
        loop = loops[k]
        digit = fused // E.const(stride, dtype)
        if k:
            digit = digit % loop.extent
        mapping[loop.var] = loop.min + digit
        stride = E.as_dim(E.binop("mul", E.const(stride, dtype), loop.extent))
    body = substitute_stmt(loops[-1].body, mapping)
    new = T.For(fused, E.const(0, dtype), E.const(stride, dtype), T.ForKind.SERIAL, body)
    return replace(func, locs[0], new), fused


# ---------------------------------------------------------------------------------------------
# reorder


def _nest(locs: list[Located]) -> list[T.For]:
    """The perfect nest from the outermost given loop down to the innermost one."""
    given: set[int] = set()
    for loc in locs:
        if id(loc.stmt.var) in given:
            raise _error("reorder", loc.stmt, "it is given twice; list each loop once")
        given.add(id(loc.stmt.var))
    top = min(locs, key=Located.depth).stmt
    chain = [top]
    found = 1
    while found < len(locs) and isinstance(chain[-1].body, T.For):
        chain.append(chain[-1].body)
        found += id(chain[-1].var) in given
    if found < len(locs):
        in_chain = {id(loop.var) for loop in chain}
        missing = next(loc.stmt for loc in locs if id(loc.stmt.var) not in in_chain)
        raise _error(
            "reorder",
            missing,
            f"it is not in the perfect nest under loop '{top.var.name}' (a loop between "
            "them has more than one statement in its body); reorder loops of one nest",
        )
    return chain


def reorder(func: T.PrimFunc, locs: list[Located]) -> T.PrimFunc:
    """Put the given loops of one perfect nest in the given order (outermost first), keeping
    the other loops of the nest where they are."""
    if len(locs) < 2:
        raise ScheduleError(f"reorder: needs at least two loops, got {len(locs)}")
    chain = _nest(locs)
    given = {id(loc.stmt.var) for loc in locs}
    order = iter(loc.stmt for loc in locs)
    new_chain = [next(order) if id(loop.var) in given else loop for loop in chain]
    for k, loop in enumerate(new_chain):
        inner = _depends_on(E.binop("add", loop.min, loop.extent), new_chain[k:])
        if inner is not None:
            raise _error(
                "reorder",
                loop,
                f"its bounds depend on loop '{inner.var.name}', which would be inside it",
            )
    body = chain[-1].body
    for loop in reversed(new_chain):
        body = dataclasses.replace(loop, body=body)
    top_loc = min(locs, key=Located.depth)
    return replace(func, top_loc, body)


# ---------------------------------------------------------------------------------------------
# loop kinds and annotations


def set_kind(
    primitive: str, func: T.PrimFunc, loc: Located, kind: T.ForKind, thread_tag: str | None = None
) -> T.PrimFunc:
    """Mark a serial loop parallel, vectorized, unrolled or bound to a GPU thread axis."""
    loop: T.For = loc.stmt
    if loop.kind is not T.ForKind.SERIAL:
        raise _error(primitive, loop, f"it is already {loop.kind.value}; a loop takes one kind")
    if kind is T.ForKind.THREAD_BINDING:
        _check_thread_tag(loc, thread_tag)
    # a GPU axis of one iteration (a scalar's one block) carries nothing
    single = (kind is T.ForKind.THREAD_BINDING and isinstance(loop.extent, E.IntImm)
              and loop.extent.value == 1)
    if kind is not T.ForKind.UNROLLED and not single:
        reason = carried_dependence(loop)
        if reason:
            raise _error(primitive, loop, f"{reason}; its iterations cannot run at once")
    return replace(func, loc, dataclasses.replace(loop, kind=kind, thread_tag=thread_tag))


def _check_thread_tag(loc: Located, tag: str | None) -> None:
    loop: T.For = loc.stmt
    if tag not in THREAD_TAGS:
        raise _error(
            "bind",
            loop,
            f"unknown thread axis {tag!r}; use one of {', '.join(sorted(THREAD_TAGS))}",
        )
    nested = [p for p, _, _ in loc.path] + [x.stmt for x in walk(loop.body)]
    clash = next((s for s in nested if isinstance(s, T.For) and s.thread_tag == tag), None)
    if clash is not None:
        raise _error("bind", loop, f"loop '{clash.var.name}' around or inside it is bound to {tag}")


def add_unit_loop(func: T.PrimFunc, loc: Located) -> tuple[T.PrimFunc, E.Var]:
    """A loop of one iteration right around a block or loop (whose variable nothing uses),
    to bind a nest without a loop of its own, such as a reduction into a scalar."""
    unit = E.Var("unit")
    return replace(func, loc, T.For(unit, E.const(0), E.const(1), T.ForKind.SERIAL, loc.stmt)), unit


def annotate(func: T.PrimFunc, loc: Located, key: str, value) -> T.PrimFunc:
    """Set annotation `key` of a loop or block (replacing an earlier value of that key)."""
    where = (
        f"loop '{loc.stmt.var.name}'" if isinstance(loc.stmt, T.For) else f"block '{loc.stmt.name}'"
    )
    if not isinstance(key, str) or not key:
        raise schedule_error("annotate", where, f"key {key!r} is not a non-empty string")
    if not isinstance(value, ANNOTATION_TYPES):
        raise schedule_error(
            "annotate",
            where,
            f"value of type {type(value).__name__} for {key!r}; use an int, float, string or bool",
        )
    kept = tuple((k, v) for k, v in loc.stmt.annotations if k != key)
    return replace(func, loc, dataclasses.replace(loc.stmt, annotations=(*kept, (key, value))))
