"""Whether the iterations of a loop are independent, from the regions its blocks declare.

`parallel`, `vectorize` and `bind` run the iterations of a loop at the same time, which
keeps the result only when no iteration touches an element another iteration writes. The
check is conservative: it states the accesses of every block under the loop in terms of
the loop variables (substituting each block's bindings) and accepts the loop only when

* no reduction variable of a block depends on the loop (its iterations would accumulate
  into the same element),
* every block that writes depends on the loop through a spatial variable, and each of its
  writes is one element indexed by every such variable (so iterations write apart),
* every access to a buffer written under the loop is that same single element (so no
  iteration reads what another writes), buffers allocated under the loop being private,
* nothing outside blocks stores or branches on memory (undeclared accesses).

It relies on bindings mapping loop iterations one-to-one onto block iterations, which the
te-built functions and the split/fuse primitives keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.printer import format_expr
from tcc.lower.schedule.rewrite import substitute_expr


@dataclass
class _BlockUse:
    block: T.Block
    bindings: dict  # iteration Var (its own and enclosing blocks') -> value in loop variables


def _depends(e: E.PrimExpr, var: E.Var) -> bool:
    return any(v is var for v in E.free_vars(e))


def _has_load(e: E.PrimExpr) -> bool:
    if isinstance(e, E.BufferLoad):
        return True
    for f in e.__dataclass_fields__:
        v = getattr(e, f)
        parts = v if isinstance(v, tuple) else (v,)
        if any(isinstance(x, E.PrimExpr) and _has_load(x) for x in parts):
            return True
    return False


def _collect(
    s: T.Stmt, env: dict, uses: list[_BlockUse], private: set, in_block: bool = False
) -> str | None:
    """Gather the blocks under `s`; the reason to refuse when something is not declared
    (inside a block, its regions declare every access)."""
    if isinstance(s, T.Block):
        bindings = {**env, **{iv.var: substitute_expr(iv.binding, env) for iv in s.iter_vars}}
        uses.append(_BlockUse(s, bindings))
        private.update(id(b) for b in s.alloc_buffers)
        return _collect(s.body, bindings, uses, private, True)
    if isinstance(s, T.For):
        return _collect(s.body, env, uses, private, in_block)
    if isinstance(s, T.Allocate):
        private.add(id(s.buffer))
        return _collect(s.body, env, uses, private, in_block)
    if isinstance(s, T.SeqStmt):
        for x in s.stmts:
            reason = _collect(x, env, uses, private, in_block)
            if reason:
                return reason
        return None
    if isinstance(s, T.IfThenElse):
        if not in_block and _has_load(s.cond):
            return f"a condition reads memory (`{format_expr(s.cond)}`) outside any block"
        for x in (s.then_case, s.else_case):
            reason = _collect(x, env, uses, private, in_block) if x is not None else None
            if reason:
                return reason
        return None
    if isinstance(s, T.BufferStore) and not in_block:
        return f"it stores to '{s.buffer.name}' outside any block, where no region is declared"
    return None


def _unit(extent: E.PrimExpr) -> bool:
    return isinstance(extent, E.IntImm) and extent.value == 1


def _point(region: T.BufferRegion) -> bool:
    return all(_unit(ext) for _, ext in region.ranges)


def _reads_and_writes(use: _BlockUse):
    for kind, regions in (("writes", use.block.writes), ("reads", use.block.reads)):
        for r in regions:
            yield kind, r


def _region_text(r: T.BufferRegion) -> str:
    parts = [
        format_expr(lo) if _unit(ext) else f"{format_expr(lo)}:{format_expr(lo + ext)}"
        for lo, ext in r.ranges
    ]
    return f"{r.buffer.name}[{', '.join(parts)}]"


def _check_block(use: _BlockUse, var: E.Var, private: set[int]) -> str | None:
    """A block's own reasons: a reduction over the loop, or writes that iterations share
    (storage allocated under the loop is each iteration's own)."""
    block = use.block
    fed = []
    for iv in block.iter_vars:
        if not _depends(use.bindings[iv.var], var):
            continue
        if iv.kind is T.IterKind.REDUCE:
            return (
                f"it carries reduction variable {iv.var.name} of block '{block.name}', "
                "whose iterations accumulate into the same element"
            )
        fed.append(iv.var)
    shared = [r for r in block.writes if id(r.buffer) not in private]
    if not shared:
        return None
    if not fed:
        return f"every iteration runs block '{block.name}' on the same elements"
    for r in shared:
        indices = [lo for lo, _ in r.ranges]
        if not _point(r) or any(not any(i is v for i in indices) for v in fed):
            return (
                f"block '{block.name}' writes {_region_text(r)}, which does not tell the "
                "iterations apart"
            )
    return None


def carried_dependence(loop: T.For) -> str | None:
    """Why the iterations of `loop` may not run at the same time, or None when they may."""
    uses: list[_BlockUse] = []
    private: set[int] = set()
    reason = _collect(loop.body, {}, uses, private)
    if reason:
        return reason
    for use in uses:
        reason = _check_block(use, loop.var, private)
        if reason:
            return reason
    written: dict[int, tuple] = {}  # buffer id -> the one element (in loop variables) written
    for use in uses:
        for r in use.block.writes:
            if id(r.buffer) not in private:
                written.setdefault(
                    id(r.buffer), tuple(substitute_expr(lo, use.bindings) for lo, _ in r.ranges)
                )
    for use in uses:
        for kind, r in _reads_and_writes(use):
            want = written.get(id(r.buffer))
            if want is None:
                continue
            got = tuple(substitute_expr(lo, use.bindings) for lo, _ in r.ranges)
            if not _point(r) or got != want:
                return (
                    f"block '{use.block.name}' {kind} {_region_text(r)}, which other "
                    f"iterations of the loop write"
                )
    return None
