"""The tensor level (like TensorIR): buffers, statements, blocks, and PrimFunc.

A PrimFunc takes buffers (and scalar size variables) and is a loop nest of `For` loops
around `Block`s. A block names its iteration variables (spatial or reduction, each bound
to an expression of the enclosing loop variables) and the buffer regions it reads and
writes; schedule primitives rely on those declarations to keep results unchanged.
Nodes are immutable; `Buffer` and `Var` compare by identity.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tcc.ir.expr import Dim, PrimExpr, Var


@dataclass(frozen=True, eq=False)
class Buffer:
    """A named multi-dimensional array in some memory scope ("global", "shared", "local")."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    scope: str = "global"

    def __getitem__(self, indices):
        from tcc.ir.expr import BufferLoad, const

        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(const(i) for i in indices))


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


class Stmt:
    __slots__ = ()


@dataclass(frozen=True)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@dataclass(frozen=True)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class For(Stmt):
    """`for var in range(min, min + extent)`; `thread_tag` names the GPU axis when bound."""

    var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str | None = None
    annotations: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True)
class Allocate(Stmt):
    """Storage for `buffer` that lives for the duration of `body`."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (e.g. an extern call); usually a no-op marker."""

    value: PrimExpr


@dataclass(frozen=True)
class IterVar:
    """A block iteration variable over [0, extent), bound to `binding` (of the loop vars)."""

    var: Var
    extent: PrimExpr
    kind: IterKind
    binding: PrimExpr


@dataclass(frozen=True)
class BufferRegion:
    """A rectangular region: per dimension a (min, extent) pair."""

    buffer: Buffer
    ranges: tuple[tuple[PrimExpr, PrimExpr], ...]


@dataclass(frozen=True)
class Block(Stmt):
    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: tuple[tuple[str, object], ...] = ()


PrimParam = Buffer | Var


@dataclass(frozen=True)
class PrimFunc:
    """A tensor-level function: parameters are buffers (and scalar vars); outputs are the
    trailing buffers, as in DPS (destination-passing style)."""

    params: tuple[PrimParam, ...]
    body: Stmt
    attrs: tuple[tuple[str, object], ...] = field(default=())

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))


def seq(*stmts: Stmt) -> Stmt:
    """A statement sequence, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, SeqStmt) else [s])
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


def syncthreads() -> Evaluate:
    """The block-wide GPU barrier statement (CUDA `__syncthreads()`), `evaluate(syncthreads())`."""
    from tcc.ir.expr import Call

    return Evaluate(Call("syncthreads", (), "int32"))
