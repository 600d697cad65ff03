"""Features of a scheduled kernel for the cost model: numbers read off its loop nest.

For each leaf block (a stage's computation, an init or a write-back) under its loops: the
iterations it runs (log2), split by loop kind (parallel, vector lanes, unrolled, serial);
the innermost loop's kind and extent; how each load and the store move along the two
innermost loops (stride 0: reused, 1: contiguous, other: strided); the arithmetic per
iteration; how many of the enclosing loops each load is invariant to (its reuse); and
whether it writes a local buffer or runs under a guard. The three blocks with the most
iterations are described in that order, after a few whole-kernel numbers (blocks, parallel
regions, total iterations), so every kernel gives a vector of the same length. Sizes are
evaluated at the shapes the kernel is tuned at.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.rules.analysis import subexprs
from tcc.tune.measure import size_env

BLOCKS = 3
KINDS = (T.ForKind.PARALLEL, T.ForKind.VECTORIZED, T.ForKind.UNROLLED, T.ForKind.SERIAL)
KERNEL = 4
LOADS = 1 + 2 * len(KINDS) + 1 + 2 * 3 + 2 * 3  # where a block's load count is
PER_BLOCK = LOADS + 5  # then reuse, arithmetic, local, guarded
LENGTH = KERNEL + BLOCKS * PER_BLOCK


def _log(x: float) -> float:
    return math.log2(x) if x > 1 else 0.0


def _value(e, env: dict, default: int = 1) -> int:
    try:
        return int(E.evaluate(e, env))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return default


class _Leaf:
    def __init__(self, loops, store, bindings, guarded):
        self.loops = loops  # [(var, extent, kind)], outermost first
        self.store = store
        self.bindings = bindings
        self.guarded = guarded


def _leaves(stmt, loops, env, bindings, guarded, out) -> None:
    if isinstance(stmt, T.For):
        extent = _value(stmt.extent, env)
        env[stmt.var] = 0
        _leaves(stmt.body, [*loops, (stmt.var, extent, stmt.kind)], env, bindings, guarded, out)
    elif isinstance(stmt, T.SeqStmt):
        for s in stmt.stmts:
            _leaves(s, loops, env, bindings, guarded, out)
    elif isinstance(stmt, T.Block):
        inner = {**bindings, **{iv.var: iv.binding for iv in stmt.iter_vars}}
        if stmt.init is not None:
            _leaves(stmt.init, loops, env, inner, guarded, out)
        _leaves(stmt.body, loops, env, inner, guarded, out)
    elif isinstance(stmt, T.IfThenElse):
        _leaves(stmt.then_case, loops, env, bindings, True, out)
        if stmt.else_case is not None:
            _leaves(stmt.else_case, loops, env, bindings, True, out)
    elif isinstance(stmt, T.Allocate):
        _leaves(stmt.body, loops, env, bindings, guarded, out)
    elif isinstance(stmt, T.BufferStore):
        out.append(_Leaf(loops, stmt, bindings, guarded))


def _flat_index(access, point: dict, env: dict) -> int:
    """The access's element offset with loop variables at `point` (others 0)."""
    scope = {**env, **point}
    flat = 0
    for index, dim in zip(access.indices, access.buffer.shape):
        flat = flat * _value(dim, scope) + _value(index, scope, 0)
    return flat


def _stride_class(access, bindings, var, env) -> int:
    """0: invariant, 1: contiguous, 2: strided, along loop variable `var`."""
    values = {}
    for at in (0, 1):
        point = {var: at}
        point.update({iv: _value(b, {**env, **point}, 0) for iv, b in bindings.items()})
        values[at] = _flat_index(access, point, env)
    step = abs(values[1] - values[0])
    return 0 if step == 0 else 1 if step == 1 else 2


def _block_features(leaf: _Leaf, env: dict) -> list[float]:
    total = sum(_log(e) for _, e, _ in leaf.loops)
    by_kind = [sum(_log(e) for _, e, k in leaf.loops if k is kind) for kind in KINDS]
    innermost = leaf.loops[-1] if leaf.loops else None
    inner_kind = [float(innermost is not None and innermost[2] is kind) for kind in KINDS]
    loads = [x for x in subexprs(leaf.store.value) if isinstance(x, E.BufferLoad)]
    strides = []
    for depth in (1, 2):
        counts = [0.0, 0.0, 0.0]
        if len(leaf.loops) >= depth:
            var = leaf.loops[-depth][0]
            for ld in loads:
                counts[_stride_class(ld, leaf.bindings, var, env)] += 1
        strides += counts
    store = []
    for depth in (1, 2):
        cls = (_stride_class(leaf.store, leaf.bindings, leaf.loops[-depth][0], env)
               if len(leaf.loops) >= depth else 0)
        store += [float(cls == 0), float(cls == 1), float(cls == 2)]
    reuse = 0.0
    outer = leaf.loops[-4:]
    for ld in loads:
        reuse += sum(_stride_class(ld, leaf.bindings, v, env) == 0 for v, _, _ in outer)
    arithmetic = sum(isinstance(x, (E.BinOp, E.Call, E.Select)) for x in
                     subexprs(leaf.store.value))
    return [total, *by_kind, *inner_kind, _log(innermost[1]) if innermost else 0.0,
            *strides, *store, float(len(loads)), reuse / max(1, len(loads) * len(outer)),
            _log(arithmetic + 1) + total, float(leaf.store.buffer.scope == "local"),
            float(leaf.guarded)]


def features(func: T.PrimFunc, shapes: dict[str, int]) -> np.ndarray:
    """The feature vector (LENGTH floats) of a scheduled kernel at `shapes`."""
    env = size_env(func, shapes)
    leaves: list[_Leaf] = []
    _leaves(func.body, [], env, {}, False, leaves)
    # most iterations first; of a block's init and update, the update (it loads)
    rows = sorted((_block_features(leaf, env) for leaf in leaves),
                  key=lambda r: (-r[0], -r[LOADS]))
    parallel = sum(1 for leaf in leaves if any(k is T.ForKind.PARALLEL for _, _, k in leaf.loops))
    total = sum(2.0 ** r[0] for r in rows)
    out = [float(len(leaves)), float(parallel), _log(total), float(len(func.params))]
    for r in rows[:BLOCKS]:
        out += r
    out += [0.0] * (LENGTH - len(out))
    return np.asarray(out, dtype=np.float32)
