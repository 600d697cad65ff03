"""insert_barriers: a GPU block's threads wait for each other where shared memory needs it.

A schedule that shares a "shared" buffer among the threads of a GPU block (partial sums
that one statement writes under a `threadIdx` loop and the next reads) needs a barrier
between the two: `tir.syncthreads()`. This pass adds them, so that no rule has to place
them by hand. It looks only at statements inside a `blockIdx` loop and outside every
`threadIdx` loop, the block-level code every thread of a block runs, whose conditions
and serial loops are the same for all of them (so every thread reaches each barrier):

* in a sequence, before a statement that touches a shared buffer an earlier statement
  wrote since the last barrier, or writes one an earlier statement read (read after
  write, write after read and write after write between threads);
* at the end of a serial loop's body that writes a shared buffer, so that the next
  iteration's writes wait for this one's reads.

It changes nothing else, and a function without shared buffers under a `blockIdx` loop
(every CPU kernel) comes back as the same object.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.regions import iter_loads
from tcc.lower.schedule.rewrite import substitute_expr


def insert_barriers(func: T.PrimFunc) -> T.PrimFunc:
    body = _host(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


def _bound(s: T.Stmt, prefix: str) -> bool:
    return (isinstance(s, T.For) and s.kind is T.ForKind.THREAD_BINDING
            and (s.thread_tag or "").startswith(prefix))


def _host(s: T.Stmt) -> T.Stmt:
    """Outside the grid: find the blockIdx loops."""
    if _bound(s, "blockIdx"):
        body = _grid(s.body)
        return s if body is s.body else dataclasses.replace(s, body=body)
    return _map_children(s, _host)


def _grid(s: T.Stmt) -> T.Stmt:
    """Block-level code: sequences get barriers; thread loops are left whole."""
    if _bound(s, "threadIdx"):
        return s
    if isinstance(s, T.SeqStmt):
        items = [_grid(c) for c in s.stmts]
        out: list[T.Stmt] = []
        written: set[int] = set()
        read: set[int] = set()
        for item in items:
            r, w = _shared_accesses(item)
            if (r | w) & written or w & read:
                out.append(T.syncthreads())
                written, read = set(), set()
            written |= w
            read |= r
            out.append(item)
        if len(out) == len(s.stmts) and all(a is b for a, b in zip(out, s.stmts)):
            return s
        return T.SeqStmt(tuple(out))
    if isinstance(s, T.For):
        body = _grid(s.body)
        if _iterations_share(s, body):
            body = T.seq(body, T.syncthreads())
        return s if body is s.body else dataclasses.replace(s, body=body)
    return _map_children(s, _grid)


def _iterations_share(loop: T.For, body: T.Stmt) -> bool:
    """Whether one iteration of a block-level loop may touch shared memory that another
    writes: it writes a shared buffer, runs more than once, is not a loop over the grid's
    blocks (each iteration its own block, with its own shared memory), and is not a
    copy whose iterations write disjoint boxes and read no shared memory."""
    if _bound(loop, "blockIdx"):
        return False
    reads, writes = _shared_accesses(body)
    trips = R.const_value(loop.extent)
    if not writes or trips == 1:
        return False
    return bool(reads) or not _disjoint_iterations(loop, body)


def _disjoint_iterations(loop: T.For, body: T.Stmt) -> bool:
    """Whether the shared elements one iteration of `loop` writes are a box that moves, in
    some dimension, by at least its own extent from one iteration to the next."""
    found = [a for a in R.accesses(body) if a.kind == "writes" and a.buffer.scope == "shared"]
    by_buffer: dict[int, list[R.Access]] = {}
    for a in found:
        by_buffer.setdefault(id(a.buffer), []).append(a)
    step = {loop.var: loop.var + 1}
    for accesses in by_buffer.values():
        ranges: dict = {}
        for a in accesses:
            ranges.update(R.loop_ranges(a.loops))
        box = R.box([a.in_loops for a in accesses], ranges)
        if box is None:
            return False
        if not any(_moves_past(lo, ext, step) for lo, ext in zip(box.mins, box.extents)):
            return False
    return True


def _moves_past(lo: E.PrimExpr, extent: E.PrimExpr, step: dict) -> bool:
    size = R.const_value(extent)
    shift = R.const_value(substitute_expr(lo, step) - lo)
    return size is not None and shift is not None and shift >= size


def _map_children(s: T.Stmt, fn) -> T.Stmt:
    if isinstance(s, T.SeqStmt):
        items = tuple(fn(c) for c in s.stmts)
        return s if all(a is b for a, b in zip(items, s.stmts)) else T.SeqStmt(items)
    if isinstance(s, (T.For, T.Allocate)):
        body = fn(s.body)
        return s if body is s.body else dataclasses.replace(s, body=body)
    if isinstance(s, T.Block):
        body = fn(s.body)
        init = None if s.init is None else fn(s.init)
        if body is s.body and init is s.init:
            return s
        return dataclasses.replace(s, body=body, init=init)
    if isinstance(s, T.IfThenElse):
        then = fn(s.then_case)
        other = None if s.else_case is None else fn(s.else_case)
        if then is s.then_case and other is s.else_case:
            return s
        return dataclasses.replace(s, then_case=then, else_case=other)
    return s


def _shared_accesses(s: T.Stmt) -> tuple[set[int], set[int]]:
    """Ids of the shared buffers `s` reads and writes, anywhere inside it."""
    reads: set[int] = set()
    writes: set[int] = set()

    def walk(x):
        if isinstance(x, T.BufferStore):
            if x.buffer.scope == "shared":
                writes.add(id(x.buffer))
            for e in (x.value, *x.indices):
                _loads(e, reads)
        elif isinstance(x, T.SeqStmt):
            for c in x.stmts:
                walk(c)
        elif isinstance(x, T.For):
            _loads(x.extent, reads)
            walk(x.body)
        elif isinstance(x, T.Allocate):
            walk(x.body)
        elif isinstance(x, T.Block):
            for iv in x.iter_vars:
                _loads(iv.binding, reads)
            if x.init is not None:
                walk(x.init)
            walk(x.body)
        elif isinstance(x, T.IfThenElse):
            _loads(x.cond, reads)
            walk(x.then_case)
            if x.else_case is not None:
                walk(x.else_case)
        elif isinstance(x, T.Evaluate):
            _loads(x.value, reads)

    walk(s)
    return reads, writes


def _loads(e, out: set[int]) -> None:
    for ld in iter_loads(e):
        if ld.buffer.scope == "shared":
            out.add(id(ld.buffer))
