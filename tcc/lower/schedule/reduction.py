"""decompose_reduction: split a reduction block's init into a block of its own, as a
function from the current PrimFunc to the rewritten one.

The init block runs once per element, in copies of the spatial loops under the chosen
loop, right before that loop; the reduction block keeps only its update. That keeps the
result only when every iteration of the reduction for an element comes after the init:
no reduction loop outside the chosen loop, no loop under it that repeats the reduction,
no loop feeding both kinds of variable; anything else is refused.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.printer import format_expr
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.blocks import error, func_vars, merged, require_scope
from tcc.lower.schedule.regions import iter_loads, point_region
from tcc.lower.schedule.rewrite import (
    conjunction,
    conjuncts,
    map_exprs,
    substitute_expr,
    substitute_stmt,
)
from tcc.lower.schedule.scope import unique_name
from tcc.lower.schedule.state import Located, ScheduleError, find_loop, replace, walk


def feeding_kinds(block: T.Block, var: E.Var) -> set[T.IterKind]:
    """The kinds of the iteration variables whose binding uses a loop variable."""
    return {iv.kind for iv in block.iter_vars if E.uses(iv.binding, var)}


def _init_loops(block: T.Block, loops: list[T.For], k: int) -> list[T.For]:
    """The loops from the `k`-th one down that the init block needs: those feeding spatial
    variables; refused when a loop outside feeds a reduction, a loop feeds both, or one
    feeding nothing repeats the reduction."""
    reducing = [f for f in loops if T.IterKind.REDUCE in feeding_kinds(block, f.var)]
    outer = next((f for f in reducing if loops.index(f) < k), None)
    if outer is not None:
        raise error(
            "decompose_reduction",
            block,
            f"loop '{outer.var.name}' outside loop "
            f"'{loops[k].var.name}' runs its reduction; decompose at a loop outside every "
            "reduction loop",
        )
    repeat = next(
        (f for f in loops[k:]
         if not feeding_kinds(block, f.var) and R.const_value(f.extent) != 1),
        None,
    )
    if repeat is not None:
        raise error(
            "decompose_reduction",
            block,
            f"loop '{repeat.var.name}' feeds no iteration variable and repeats the whole "
            "reduction, which needs the init each time; decompose at a loop inside it",
        )
    spatial = [f for f in loops[k:] if T.IterKind.SPATIAL in feeding_kinds(block, f.var)]
    both = next((f for f in spatial if f in reducing), None)
    if both is not None:
        raise error(
            "decompose_reduction",
            block,
            f"loop '{both.var.name}' feeds both spatial and "
            "reduction variables; split it apart first",
        )
    dropped = {id(f.var) for f in loops[k:] if f not in spatial}
    for f in spatial:
        if any(id(v) in dropped for v in E.free_vars([f.min, f.extent])):
            raise error(
                "decompose_reduction",
                block,
                f"the bounds of loop '{f.var.name}' depend on a reduction loop",
            )
    return spatial


def _init_predicate(block_loc: Located, depth: int, loops: list[T.For], kept: list[T.For]):
    """The conditions of the predicate around the block that concern the init block: those
    over spatial loops; refused for one mixing spatial and reduction loops."""
    dropped = {id(f.var) for f in loops if f not in kept}
    inner_kept = {id(f.var) for f in kept}
    conds = []
    for parent, field, _ in block_loc.path[depth:]:
        if not isinstance(parent, T.IfThenElse) or field != "then_case":
            continue
        for c in conjuncts(parent.cond):
            used = {id(v) for v in E.free_vars(c)}
            if used & dropped and used & inner_kept:
                raise error(
                    "decompose_reduction",
                    block_loc.stmt,
                    f"its predicate `{format_expr(c)}` ties spatial and reduction loops",
                )
            if not used & dropped:
                conds.append(c)
    return conds


def decompose_reduction(
    func: T.PrimFunc, block_loc: Located, loop_loc: Located
) -> tuple[T.PrimFunc, str]:
    """Split a reduction block's init into a block of its own, in a copy of the spatial
    loops under `loop`, placed right before `loop`; the block keeps only its update.
    Returns the function and the init block's name."""
    block: T.Block = block_loc.stmt
    loop: T.For = loop_loc.stmt
    scope = require_scope("decompose_reduction", func, block_loc)
    if block.init is None:
        raise error("decompose_reduction", block, "it has no init to split off")
    loops = block_loc.loops()
    k = next((n for n, f in enumerate(loops) if f.var is loop.var), None)
    if k is None:
        raise error(
            "decompose_reduction", block, f"loop '{loop.var.name}' is not around it in its scope"
        )
    kept = _init_loops(block, loops, k)
    conds = _init_predicate(block_loc, len(loop_loc.path), loops[k:], kept)
    loop_map = {f.var: E.Var(f"{f.var.name}_init", f.var.dtype) for f in kept}
    spatial = [iv for iv in block.iter_vars if iv.kind is T.IterKind.SPATIAL]
    iv_map = {iv.var: E.Var(f"{iv.var.name}_init", iv.var.dtype) for iv in spatial}
    allowed = {id(v) for v in iv_map} | func_vars(func)
    if any(id(v) not in allowed for v in _stmt_vars(block.init)):
        raise error("decompose_reduction", block, "its init uses a reduction variable")
    body = substitute_stmt(block.init, iv_map)
    init = T.Block(
        unique_name(f"{block.name}_init", scope.names()),
        tuple(
            T.IterVar(iv_map[iv.var], iv.extent, iv.kind, substitute_expr(iv.binding, loop_map))
            for iv in spatial
        ),
        merged((), (point_region(ld.buffer, ld.indices) for ld in iter_loads(body))),
        tuple(substitute_stmt(r, iv_map) for r in block.writes),
        body,
    )
    stmt: T.Stmt = init
    if conds:
        stmt = T.IfThenElse(substitute_expr(conjunction(conds), loop_map), stmt)
    for f in reversed(kept):
        stmt = T.For(
            loop_map[f.var],
            substitute_expr(f.min, loop_map),
            substitute_expr(f.extent, loop_map),
            T.ForKind.SERIAL,
            stmt,
        )
    func = replace(func, block_loc, dataclasses.replace(block, init=None))
    loop_loc = find_loop(func, loop.var)
    return replace(func, loop_loc, T.seq(stmt, loop_loc.stmt)), init.name


def _stmt_vars(s: T.Stmt) -> list[E.Var]:
    """The variables a statement uses."""
    found: list[E.Var] = []
    map_exprs(s, lambda e: found.append(e) if isinstance(e, E.Var) else None)
    return found


def decompose_empty_reductions(func: T.PrimFunc) -> T.PrimFunc:
    """`func` with the init of each reduction block whose reduction loops may run no
    iteration (an extent not known to be at least 1: a size read when the program runs, 0
    for an empty slice) split off before its outermost reduction loop (`decompose_reduction`).
    Kept in the block, the init runs when every reduction variable is at its first value,
    which a reduction over no values never reaches: its output would keep whatever the
    buffer held, where it must hold the init (the sum of nothing is 0). Blocks whose loops
    all run, blocks `decompose_reduction` refuses and GPU kernels (their thread loops) stay
    as they are."""
    if any(isinstance(loc.stmt, T.For) and loc.stmt.kind is T.ForKind.THREAD_BINDING
           for loc in walk(func.body)):
        return func
    refused: set[str] = set()
    while True:
        for loc in walk(func.body):
            block = loc.stmt
            if not isinstance(block, T.Block) or block.init is None or block.name in refused:
                continue
            reducing = {id(v) for iv in block.iter_vars if iv.kind is T.IterKind.REDUCE
                        for v in E.free_vars([iv.binding])}
            feeding = [f for f in loc.loops() if id(f.var) in reducing]
            if all(isinstance(f.extent, E.IntImm) and f.extent.value >= 1 for f in feeding):
                continue
            try:
                func, _ = decompose_reduction(func, loc, find_loop(func, feeding[0].var))
            except ScheduleError:
                refused.add(block.name)
            break  # the function changed: walk it again
        else:
            return func
