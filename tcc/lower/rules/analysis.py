"""What the rules read off a stage block: its loop nest, its iteration variables, and how
each buffer access moves when one iteration variable steps by one.

Rules recognise kernels by this structure, never by name. A stage is in *canonical form*
when each of its iteration variables is bound to exactly one loop variable, the loops are
perfectly nested around the block in the order of the iteration variables, and spatial
variables come before reduction variables: the form `te.create_prim_func` produces for
every stage and that the fuse-ops pass keeps. Rules that need the form skip stages without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule import BlockRV, LoopRV, Schedule
from tcc.lower.schedule.rewrite import substitute_expr


@dataclass(frozen=True)
class Axis:
    """One iteration variable of a canonical stage and the loop that drives it."""

    iter_var: T.IterVar
    loop: LoopRV
    extent: int | None  # None when symbolic

    @property
    def var(self) -> E.Var:
        return self.iter_var.var

    @property
    def is_reduce(self) -> bool:
        return self.iter_var.kind is T.IterKind.REDUCE


@dataclass(frozen=True)
class Stage:
    """A canonical stage: its block, its axes (spatial first), its one store and its loads."""

    block: T.Block
    axes: tuple[Axis, ...]
    store: T.BufferStore
    loads: tuple[E.BufferLoad, ...]

    @property
    def spatial(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if not a.is_reduce)

    @property
    def reduce(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if a.is_reduce)

    @property
    def dtype(self) -> str:
        return self.store.buffer.dtype

    def work(self) -> int | None:
        """Iterations of the whole nest, None when an extent is symbolic."""
        total = 1
        for a in self.axes:
            if a.extent is None:
                return None
            total *= a.extent
        return total

    def innermost_write_axis(self) -> Axis | None:
        """The spatial axis whose variable is the store's last index, if there is one: stepping
        it moves the store to the next element."""
        if not self.store.indices:
            return None
        last = self.store.indices[-1]
        return next((a for a in self.spatial if last is a.var), None)


def constant(e) -> int | None:
    return e.value if isinstance(e, E.IntImm) else e if isinstance(e, int) else None


def plain_load(load: E.BufferLoad, axes) -> bool:
    """Whether every index of `load` is one of `axes`' variables or a constant."""
    vars_ = {id(a.var) for a in axes}
    return all(isinstance(i, E.IntImm) or (isinstance(i, E.Var) and id(i) in vars_)
               for i in load.indices)


def canonical_stage(sch: Schedule, block: BlockRV) -> Stage | None:
    """The stage of `block` in canonical form (see the module docstring), or None."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    if len(loops) != len(stmt.iter_vars) or not isinstance(stmt.body, T.BufferStore):
        return None
    axes = []
    for iv, loop in zip(stmt.iter_vars, loops):
        f = sch.get(loop)
        if iv.binding is not f.var or constant(f.min) != 0 or f.kind is not T.ForKind.SERIAL:
            return None
        axes.append(Axis(iv, loop, constant(f.extent)))
    kinds = [a.is_reduce for a in axes]
    if kinds != sorted(kinds):
        return None
    return Stage(stmt, tuple(axes), stmt.body, tuple(_loads(stmt.body.value)))


def subexprs(e: E.PrimExpr) -> list[E.PrimExpr]:
    """`e` and every expression under it, in pre-order."""
    found: list[E.PrimExpr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        found.append(x)
        for name in x.__dataclass_fields__:
            child = getattr(x, name)
            stack.extend(c for c in (child if isinstance(child, tuple) else (child,))
                         if isinstance(c, E.PrimExpr))
    return found


def _loads(e: E.PrimExpr) -> list[E.BufferLoad]:
    return [x for x in subexprs(e) if isinstance(x, E.BufferLoad)]


def guarded_load_along(stage: Stage, var: E.Var) -> bool:
    """True when a select whose condition changes with `var` loads in a branch (padding) at
    other than unit or zero stride along `var`: only the chosen branch may load, and the
    backend masks a contiguous load per lane (llvm.masked.load) and reads a load the same
    for every lane once, but runs any other guarded load as a scalar loop, unless it reads
    one element known to be in bounds."""
    for x in subexprs(stage.store.value):
        if isinstance(x, E.Select) and E.uses(x.cond, var):
            guarded = [*_loads(x.true_value), *_loads(x.false_value)]
            if any(stride(ld, var) not in (0, 1) and not ld.at_fixed_element() for ld in guarded):
                return True
    return False


def chosen_by_position(stage: Stage, most: int) -> dict[E.Var, int]:
    """Spatial variables whose position selects compare with constants, each with its period:
    `v == k` for a variable of constant extent at most `most` (the period is the extent), or
    `v % m == k` with m at most `most`. Unrolled over one period, every such select is
    decided at compile time (the Winograd transforms pick their coefficients by tile
    position)."""
    extents = {a.var: a.extent for a in stage.spatial}
    found: dict[E.Var, int] = {}
    for x in subexprs(stage.store.value):
        if not (isinstance(x, E.Cmp) and x.op == "eq" and isinstance(x.b, E.IntImm)):
            continue
        a = x.a
        if isinstance(a, E.Var) and extents.get(a) is not None and extents[a] <= most:
            found[a] = extents[a]
        elif (isinstance(a, E.BinOp) and a.op == "floormod" and isinstance(a.a, E.Var)
              and a.a in extents and constant(a.b) is not None and constant(a.b) <= most):
            found[a.a] = constant(a.b)
    return found


def _flat(buffer: T.Buffer, indices) -> E.PrimExpr:
    flat: E.PrimExpr = E.const(0)
    for index, dim in zip(indices, buffer.shape):
        flat = E.binop("add", E.binop("mul", flat, E.const(dim)), index)
    return flat


def stride(access: E.BufferLoad | T.BufferStore, var: E.Var) -> int | None:
    """Elements the access moves when `var` steps by one: 0 when it does not use `var`, None
    when the step is not a constant (a symbolic shape, a division)."""
    if not E.uses(list(access.indices), var):
        return 0
    flat = _flat(access.buffer, access.indices)
    stepped = substitute_expr(flat, {var: E.binop("add", var, E.const(1))})
    return constant(E.simplify(E.binop("sub", stepped, flat)))


def divisor_at_most(n: int, bound: int) -> int:
    """The largest divisor of `n` that is at most `bound` (at least 1)."""
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)
