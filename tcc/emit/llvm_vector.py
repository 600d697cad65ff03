"""Index arithmetic and the plan for turning a `vectorized` loop into LLVM vector operations.

Every buffer access is flattened to one int64 offset (row-major over the buffer's shape),
built with tcc's simplifying integer arithmetic. That normal form is what the vectorizer
reads: an offset that grows by exactly 1 when the loop variable does is a contiguous vector
load or store, one without the variable is the same for all lanes, anything else is a
gather (lane by lane).

A loop becomes vector code only when that keeps serial semantics: its body is stores,
conditions and blocks (inlined, their iteration variables replaced by their bindings),
every store is contiguous, and a buffer the body stores is loaded only at the offsets it is
stored to (so no lane reads what another wrote). A condition that depends on the loop
variable (the guard of a split's last tile) and has no else branch runs its body under a
lane mask: stores and contiguous loads are masked (`llvm.masked.store`/`load`), a load the
same for every lane reads through a safe address when no lane is active, and any other
load refuses the plan (it would be a gather touching masked-off lanes).
A select that loads in a branch (padding) and whose condition differs between lanes runs
both branches with their loads masked to the lanes that choose them, so every load under
it must be contiguous or the same for every lane: a masked vector load never touches a
masked-off lane, where the index may be out of bounds, and a uniform load reads an address
some active lane reads (through a safe address when none is active), but a lane-by-lane
gather would touch them all. A load of one element known to be in bounds
(`BufferLoad.at_fixed_element`: a scalar operand, as in `select(isnan(x), c, x)`) needs no
mask. Anything else is left to LLVM's loop vectorizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.emit.llvm_expr import children
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import is_float
from tcc.lower.schedule.state import walk

MAX_LANES = 64


def rewrite(e: E.PrimExpr, f, _simplify: bool = True) -> E.PrimExpr:
    """Replace variables by `f(var)` (None keeps one), also inside buffer-load indices.

    Integer arithmetic comes back in normal form. A chain of such ops is simplified once, at
    its top: the normal form of a sum does not depend on its terms' forms, and simplifying
    at every level made codegen quadratic in an index's depth."""
    if isinstance(e, E.Var):
        r = f(e)
        return e if r is None else r
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return e
    if isinstance(e, E.BinOp):
        poly = e.op in E.POLY_OPS
        out = E.BinOp(e.op, rewrite(e.a, f, not poly), rewrite(e.b, f, not poly), e.dtype)
        return E.simplify(out) if poly and _simplify else out
    if isinstance(e, (E.Cmp, E.Logic)):
        return type(e)(e.op, rewrite(e.a, f), rewrite(e.b, f), e.dtype)
    if isinstance(e, E.Not):
        return E.Not(rewrite(e.a, f))
    if isinstance(e, E.Select):
        return E.Select(
            rewrite(e.cond, f), rewrite(e.true_value, f), rewrite(e.false_value, f), e.dtype
        )
    if isinstance(e, E.Cast):
        return E.Cast(rewrite(e.value, f), e.dtype)
    if isinstance(e, E.Call):
        return E.Call(e.name, tuple(rewrite(a, f) for a in e.args), e.dtype)
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, tuple(rewrite(i, f) for i in e.indices))
    return e


def _is_int(dtype: str) -> bool:
    return not is_float(dtype) and dtype != "bool"


def index64(e: E.PrimExpr | int, rename: dict) -> E.PrimExpr:
    """An integer index as an int64 expression in normal form; `rename` maps variables first."""
    return E.simplify(_as_int64(e, rename))


def _as_int64(e: E.PrimExpr | int, rename: dict) -> E.PrimExpr:
    """index64 before its one simplification."""
    if isinstance(e, int):
        return E.IntImm(e, "int64")
    if isinstance(e, E.Var):
        v = rename.get(e, e)
        return v if v.dtype == "int64" else E.Cast(v, "int64")
    if isinstance(e, E.IntImm) and e.dtype != "bool":
        return E.IntImm(e.value, "int64")
    if isinstance(e, E.BinOp) and e.op in E.POLY_OPS and _is_int(e.dtype):
        return E.BinOp(e.op, _as_int64(e.a, rename), _as_int64(e.b, rename), "int64")
    if isinstance(e, E.Cast) and _is_int(e.dtype) and _is_int(e.value.dtype):
        return _as_int64(e.value, rename)  # index arithmetic does not overflow
    return E.Cast(rewrite(e, rename.get), "int64")


def flat_index(buffer: T.Buffer, indices, rename: dict | None = None) -> E.PrimExpr:
    """The row-major element offset of `buffer[indices]`."""
    rename = rename or {}
    if len(indices) != len(buffer.shape):
        from tcc.emit.support import CodegenError

        raise CodegenError(
            f"buffer {buffer.name!r} has {len(buffer.shape)} dimensions but is indexed with "
            f"{len(indices)}; index every dimension"
        )
    flat: E.PrimExpr = E.IntImm(0, "int64")
    for idx, dim in zip(indices, buffer.shape):
        flat = E.BinOp("mul", flat, _as_int64(dim, {}), "int64")
        flat = E.BinOp("add", flat, _as_int64(idx, rename), "int64")
    return E.simplify(flat)


def _linear_step(flat: E.PrimExpr, u: E.Var) -> int | None:
    """How much `flat` (in normal form: a sum of monomials) grows when `u` grows by one,
    where `u` appears only as a term `u` or `u * c`; None where it appears otherwise."""
    if isinstance(flat, E.BinOp) and flat.op in ("add", "sub"):
        a, b = _linear_step(flat.a, u), _linear_step(flat.b, u)
        if a is None or b is None:
            return None
        return a + b if flat.op == "add" else a - b
    if flat is u:
        return 1
    if (isinstance(flat, E.BinOp) and flat.op == "mul" and flat.a is u
            and isinstance(flat.b, E.IntImm)):
        return flat.b.value
    return 0 if not E.uses(flat, u) else None


def access_kind(flat: E.PrimExpr, u: E.Var) -> str:
    """'uniform', 'contiguous' (offset grows by one with `u`) or 'gather'."""
    if not E.uses(flat, u):
        return "uniform"
    step = _linear_step(flat, u)
    if step is not None:  # the usual case, without simplifying the offset again
        return "contiguous" if step == 1 else "gather"
    step = rewrite(
        flat, lambda v: E.BinOp("add", u, E.IntImm(1, "int64"), "int64") if v is u else None
    )
    diff = E.simplify(E.BinOp("sub", step, flat, "int64"))
    return "contiguous" if isinstance(diff, E.IntImm) and diff.value == 1 else "gather"


def vector_lanes(extent: int) -> int:
    """Lanes per vector step of a loop of `extent` iterations (0: none fits). A power of two
    up to MAX_LANES runs whole; otherwise the widest power of two of at least 4 (at most 32)
    that divides it, since LLVM splits a vector of another length kept across loop
    iterations (an accumulator) into single-lane inserts: a 56-lane conv micro-kernel ran
    6x slower than as 7 steps of 8 lanes. Short loops with no such divisor run whole."""
    power = extent & -extent  # the largest power of two dividing `extent`
    if power == extent and extent <= MAX_LANES:
        return extent
    if power >= 4:
        return min(power, 32)
    if extent <= MAX_LANES:
        return extent
    return power if power > 1 else 0


@dataclass
class VectorPlan:
    """A vectorizable loop: its body without blocks, the lane count per vector step, and
    the accesses of the body the plan worked out: (buffer, indices, flat offset over the
    lane variable, access kind), which the backend need not work out again."""

    body: T.Stmt
    lanes: int
    steps: int
    offsets: tuple = ()


def _inline_blocks(s: T.Stmt, subst: dict) -> T.Stmt | None:
    """The statement with blocks inlined and iteration variables replaced; None if not plain."""
    sub = (lambda v: subst.get(v)) if subst else (lambda v: None)
    if isinstance(s, T.BufferStore):
        return T.BufferStore(
            s.buffer, rewrite(s.value, sub), tuple(rewrite(i, sub) for i in s.indices)
        )
    if isinstance(s, T.SeqStmt):
        parts = [_inline_blocks(x, subst) for x in s.stmts]
        return None if any(p is None for p in parts) else T.seq(*parts)
    if isinstance(s, T.Evaluate):
        return T.SeqStmt(())
    if isinstance(s, T.IfThenElse):
        then = _inline_blocks(s.then_case, subst)
        other = _inline_blocks(s.else_case, subst) if s.else_case is not None else None
        if then is None or (s.else_case is not None and other is None):
            return None
        return T.IfThenElse(rewrite(s.cond, sub), then, other)
    if isinstance(s, T.Block) and not s.alloc_buffers:
        inner = dict(subst)
        for iv in s.iter_vars:
            binding = rewrite(iv.binding, sub)
            inner[iv.var] = (
                binding if binding.dtype == iv.var.dtype else E.Cast(binding, iv.var.dtype)
            )
        body = _inline_blocks(s.body, inner)
        if body is None:
            return None
        if s.init is None:
            return body
        init = _inline_blocks(s.init, inner)
        if init is None:
            return None
        return T.seq(T.IfThenElse(init_condition(s, inner), init), body)
    return None


def init_condition(block: T.Block, subst: dict | None = None) -> E.PrimExpr:
    """True when every reduction variable is at its first value (always true without one)."""
    cond: E.PrimExpr = E.IntImm(1, "bool")
    for iv in block.iter_vars:
        if iv.kind is T.IterKind.REDUCE:
            v = subst.get(iv.var, iv.var) if subst else iv.var
            c = E.Cmp("eq", v, E.IntImm(0, v.dtype))
            cond = c if isinstance(cond, E.IntImm) else E.Logic("and", cond, c)
    return cond


def lane_guarded(loop: T.For) -> bool:
    """True when a guard inside `loop` depends on its variable."""
    return any(
        isinstance(loc.stmt, T.IfThenElse) and E.uses(loc.stmt.cond, loop.var)
        for loc in walk(loop.body)
    )


def plan_vector(loop: T.For, u: E.Var | None = None) -> VectorPlan | None:
    """How to run `loop` as vector code, or None when only a scalar loop keeps its meaning;
    `u` is the int64 lane variable its offsets are written in (a new one if not given)."""
    if not isinstance(loop.extent, E.IntImm) or loop.extent.value < 1:
        return None
    extent = loop.extent.value
    lanes = vector_lanes(extent)
    if not lanes:
        return None
    body = _inline_blocks(loop.body, {})
    if body is None:
        return None
    u = u if u is not None else E.Var(loop.var.name, "int64")
    rename = {loop.var: u}
    stores: dict[T.Buffer, set] = {}
    loads: list[tuple[T.Buffer, E.PrimExpr]] = []
    offsets: list[tuple] = []

    unmaskable: list[E.BufferLoad] = []  # loads a lane mask would have to limit

    # `masked`: under a lane-varying select's branch or under a guard (contiguous loads, and
    # uniform ones, which read through a safe address when no lane is active); None: every
    # lane runs
    def collect_loads(e: E.PrimExpr, masked: str | None = None) -> None:
        if isinstance(e, E.BufferLoad):
            flat = flat_index(e.buffer, e.indices, rename)
            loads.append((e.buffer, flat))
            kind = access_kind(flat, u)
            offsets.append((e.buffer, e.indices, flat, kind))
            if masked and kind not in ("contiguous", "uniform") and not e.at_fixed_element():
                unmaskable.append(e)
        if isinstance(e, E.Select) and E.uses(e.cond, loop.var):
            collect_loads(e.cond, masked)
            collect_loads(e.true_value, "select")
            collect_loads(e.false_value, "select")
            return
        for c in children(e):
            collect_loads(c, masked)

    def check(s: T.Stmt, masked: str | None = None) -> bool:
        if isinstance(s, T.SeqStmt):
            return all(check(x, masked) for x in s.stmts)
        if isinstance(s, T.IfThenElse):
            collect_loads(s.cond, masked)
            if E.uses(s.cond, loop.var):  # a guard on the lanes: its body runs under a mask
                return s.else_case is None and check(s.then_case, "guard")
            return check(s.then_case, masked) and (
                s.else_case is None or check(s.else_case, masked))
        if isinstance(s, T.BufferStore):
            flat = flat_index(s.buffer, s.indices, rename)
            if access_kind(flat, u) != "contiguous":
                return False
            offsets.append((s.buffer, s.indices, flat, "contiguous"))
            stores.setdefault(s.buffer, set()).add(flat)
            collect_loads(s.value, masked)
            for i in s.indices:
                collect_loads(i, masked)
            return True
        return False

    if not check(body) or unmaskable:
        return None
    if any(len(offsets) > 1 for offsets in stores.values()):
        return None
    if any(buf in stores and flat not in stores[buf] for buf, flat in loads):
        return None
    return VectorPlan(body, lanes, extent // lanes, tuple(offsets))
