"""Facts about size variables: the range each one lies in.

A size variable is a nonnegative integer, and that is all tcc knows of it by default. A
program exported or traced for a range of sizes (torch.export's `Dim(min=, max=)`, the
ranges Dynamo's guards keep) says more, and its function checks those ranges at its entry
(a `shape(checks=...)` binding of `var >= lo` and `var <= hi`), so every op after it may
assume them. `assuming(ranges)` makes ranges the facts that shape rules and passes prove
with (`bounds`, `known_nonneg`): the importer while it builds the function, the IR parser
after it reads the entry checks, passes and legalization over a module from its functions'
entry checks (`module_ranges`), and legalization hands them to each kernel as
preconditions (tcc.lower.legalize.with_size_ranges), for the proofs over its loops.

A fact only ever proves: what it cannot settle stays as it was without it (a `max(e, 0)`
kept, a guard kept, a precondition checked).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from tcc.ir import expr as E

Range = tuple[int, "int | None"]  # (least, most); most None: unbounded
_ACTIVE: list[dict[E.Var, Range]] = []  # size variables compare by identity


def narrowed(a: Range, b: Range) -> Range:
    """The range both `a` and `b` say."""
    return max(a[0], b[0]), a[1] if b[1] is None else b[1] if a[1] is None else min(a[1], b[1])


def conditions(var: E.Var, range_: Range) -> list[E.PrimExpr]:
    """The checks that hold `var` in `range_`: `var >= least` (unless 0), `var <= most`."""
    lo, hi = range_
    return ([E.compare("ge", var, lo)] if lo > 0 else []) + (
        [E.compare("le", var, hi)] if hi is not None else [])


@contextlib.contextmanager
def assuming(ranges: Mapping[E.Var, Range]) -> Iterator[None]:
    """Within the block, each variable of `ranges` lies in its range (with the ranges of
    enclosing blocks, narrowed where both give one)."""
    merged = dict(_ACTIVE[-1]) if _ACTIVE else {}
    for var, range_ in ranges.items():
        merged[var] = narrowed(merged.get(var, (0, None)), range_)
    _ACTIVE.append(merged)
    try:
        yield
    finally:
        _ACTIVE.pop()


def range_of(var: E.Var) -> Range:
    """The range the facts give `var`: (0, None) without one."""
    return _ACTIVE[-1].get(var, (0, None)) if _ACTIVE else (0, None)


def known_ranges() -> dict[E.Var, Range]:
    """Every variable the facts give a range, with it."""
    return dict(_ACTIVE[-1]) if _ACTIVE else {}


def bounds(e) -> tuple[int | None, int | None]:
    """The least and most values of the size expression `e` under the facts (None: no
    bound known)."""
    if isinstance(e, (int, E.IntImm)):
        v = e if isinstance(e, int) else e.value
        return v, v
    if isinstance(e, E.Var):
        return range_of(e)
    if not isinstance(e, E.BinOp):
        return None, None
    (alo, ahi), (blo, bhi) = bounds(e.a), bounds(e.b)
    if e.op == "add":
        return _add(alo, blo), _add(ahi, bhi)
    if e.op == "sub":
        return _add(alo, None if bhi is None else -bhi), _add(ahi, None if blo is None else -blo)
    if e.op == "mul" and alo is not None and blo is not None and alo >= 0 and blo >= 0:
        return alo * blo, None if ahi is None or bhi is None else ahi * bhi
    if e.op == "floordiv" and blo is not None and blo == bhi and blo > 0:
        return (None if alo is None else alo // blo), (None if ahi is None else ahi // blo)
    if e.op == "min":
        return (None if alo is None or blo is None else min(alo, blo)), (
            bhi if ahi is None else ahi if bhi is None else min(ahi, bhi))
    if e.op == "max":
        return (blo if alo is None else alo if blo is None else max(alo, blo)), (
            None if ahi is None or bhi is None else max(ahi, bhi))
    return None, None


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def known_nonneg(e) -> bool:
    """Whether the facts prove `e` >= 0."""
    lo, _ = bounds(e)
    return lo is not None and lo >= 0


def checked_ranges(binding) -> dict[E.Var, Range] | None:
    """The ranges a `shape(checks=...)` binding checks (its conditions `var >= c` and
    `var <= c`); None for any other binding."""
    from tcc.ir import graph as G

    value = binding.value
    if not (isinstance(value, G.ShapeExpr) and not value.dims and value.checks):
        return None
    found: dict[E.Var, Range] = {}
    for cond, _ in value.checks:
        if not (isinstance(cond, E.Cmp) and isinstance(cond.a, E.Var)
                and isinstance(cond.b, E.IntImm) and cond.op in ("ge", "le")):
            continue
        bound = (cond.b.value, None) if cond.op == "ge" else (0, cond.b.value)
        found[cond.a] = narrowed(found.get(cond.a, (0, None)), bound)
    return found


def entry_ranges(fn) -> dict[E.Var, Range]:
    """The ranges a graph function checks before its first other binding."""
    found: dict[E.Var, Range] = {}
    for b in fn.bindings:
        ranges = checked_ranges(b)
        if ranges is None:
            break
        for var, range_ in ranges.items():
            found[var] = narrowed(found.get(var, (0, None)), range_)
    return found


def module_ranges(mod) -> dict[E.Var, Range]:
    """The entry ranges of every graph function of `mod` (each function has variables of
    its own)."""
    ranges: dict[E.Var, Range] = {}
    for fn in mod.graph_functions.values():
        ranges.update(entry_ranges(fn))
    return ranges
