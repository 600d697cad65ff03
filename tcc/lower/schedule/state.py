"""Handles, errors and navigation of the PrimFunc a schedule rewrites.

PrimFunc nodes are immutable, so a primitive never edits a statement: it finds it
(`find_block`, `find_loop`, or `walk`), which gives a `Located` statement that carries its
chain of ancestors, builds the replacement, and `replace` rebuilds the ancestors around it
into a new PrimFunc. Handles name what they point to instead of holding a node: a block
by its name (unique in a function), a loop by its loop variable (a distinct object per
loop), so a handle stays valid across rewrites that keep its block or loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.errors import TccError


class ScheduleError(TccError):
    """A schedule primitive that does not apply, or whose application would change what the
    function computes. The message is one line: `<primitive>: <block or loop>: <reason>`."""


def schedule_error(primitive: str, where: str, reason: str) -> ScheduleError:
    return ScheduleError(f"{primitive}: {where}: {reason}")


@dataclass(frozen=True)
class BlockRV:
    """A block of the scheduled function, by its unique name."""

    name: str

    def __str__(self) -> str:
        return f"block '{self.name}'"


@dataclass(frozen=True)
class LoopRV:
    """A loop of the scheduled function, by its loop variable (compared by identity)."""

    var: E.Var

    def __str__(self) -> str:
        return f"loop '{self.var.name}'"


@dataclass(frozen=True, eq=False)
class ExprRV:
    """An integer chosen by a sampling instruction; `Schedule.get` gives its value."""

    hint: str

    def __str__(self) -> str:
        return f"sampled value '{self.hint}'"


Handle = BlockRV | LoopRV | ExprRV

# Where a statement hangs in its parent: the dataclass field and, inside a SeqStmt, the index.
Slot = tuple[T.Stmt, str, int | None]


@dataclass(frozen=True)
class Located:
    """A statement of a PrimFunc with its ancestors (outermost first), to rewrite it in place."""

    stmt: T.Stmt
    path: tuple[Slot, ...]

    def loops(self) -> list[T.For]:
        """The loops around the statement inside its enclosing block, outermost first."""
        found: list[T.For] = []
        for parent, _, _ in reversed(self.path):
            if isinstance(parent, T.Block):
                break
            if isinstance(parent, T.For):
                found.append(parent)
        return found[::-1]

    def depth(self) -> int:
        return len(self.path)


def _children(s: T.Stmt) -> Iterator[tuple[str, int | None, T.Stmt]]:
    if isinstance(s, T.SeqStmt):
        for i, x in enumerate(s.stmts):
            yield "stmts", i, x
    elif isinstance(s, (T.For, T.Allocate)):
        yield "body", None, s.body
    elif isinstance(s, T.IfThenElse):
        yield "then_case", None, s.then_case
        if s.else_case is not None:
            yield "else_case", None, s.else_case
    elif isinstance(s, T.Block):
        if s.init is not None:
            yield "init", None, s.init
        yield "body", None, s.body


def walk(stmt: T.Stmt, path: tuple[Slot, ...] = ()) -> Iterator[Located]:
    """Every statement under (and including) `stmt`, in pre-order, with its ancestors."""
    stack = [Located(stmt, path)]
    while stack:
        loc = stack.pop()
        yield loc
        kids = [
            Located(child, (*loc.path, (loc.stmt, field, index)))
            for field, index, child in _children(loc.stmt)
        ]
        stack.extend(reversed(kids))


def find_block(func: T.PrimFunc, name: str) -> list[Located]:
    """The blocks called `name` (one in a well-formed function)."""
    return [
        loc for loc in walk(func.body) if isinstance(loc.stmt, T.Block) and loc.stmt.name == name
    ]


def find_loop(func: T.PrimFunc, var: E.Var) -> Located | None:
    """The loop whose variable is `var`, if it is still in the function."""
    for loc in walk(func.body):
        if isinstance(loc.stmt, T.For) and loc.stmt.var is var:
            return loc
    return None


def child_blocks(stmt: T.Stmt) -> list[T.Block]:
    """The blocks under `stmt` that no other block under it encloses, in program order."""
    found: list[T.Block] = []
    stack = [child for _, _, child in _children(stmt)][::-1]
    while stack:
        s = stack.pop()
        if isinstance(s, T.Block):
            found.append(s)
            continue
        stack.extend(child for _, _, child in reversed(list(_children(s))))
    return found


def _with_child(parent: T.Stmt, field: str, index: int | None, new: T.Stmt | None) -> T.Stmt:
    if index is None:
        return dataclasses.replace(parent, **{field: T.SeqStmt(()) if new is None else new})
    stmts = list(parent.stmts)
    stmts[index : index + 1] = [] if new is None else [new]
    return T.seq(*stmts) if stmts else T.SeqStmt(())


def replace(func: T.PrimFunc, loc: Located, new: T.Stmt | None) -> T.PrimFunc:
    """The function with the located statement replaced by `new` (None removes it; a
    SeqStmt put into a sequence is spliced into it)."""
    for parent, field, index in reversed(loc.path):
        new = _with_child(parent, field, index, new)
    return dataclasses.replace(func, body=T.SeqStmt(()) if new is None else new)
