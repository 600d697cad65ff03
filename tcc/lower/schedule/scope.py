"""The blocks of one scope in program order, and what each of them reads and writes.

Block primitives move or merge computation between the blocks that one enclosing block
(usually the function's root block) holds. Whether that keeps the result depends on the
order of their accesses, so a `Scope` lists those blocks in program order with the buffers
each writes and reads (its declared regions, and the loads in its body: a reduction reads
its accumulator without declaring it), and tells when one block runs entirely before
another: earlier in program order and under no loop they share, so that no later iteration
comes back to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir import tir as T
from tcc.lower.schedule.regions import iter_loads
from tcc.lower.schedule.state import Located, walk


def enclosing_block(loc: Located) -> Located | None:
    """The nearest block around a statement, located."""
    for k in range(len(loc.path) - 1, -1, -1):
        if isinstance(loc.path[k][0], T.Block):
            return Located(loc.path[k][0], loc.path[:k])
    return None


def ancestor(loc: Located, depth: int) -> Located:
    """The ancestor of a located statement at `depth` in its path (itself at its depth)."""
    if depth >= len(loc.path):
        return loc
    return Located(loc.path[depth][0], loc.path[:depth])


def writes(block: T.Block) -> set[int]:
    """The buffers (by id) a block writes."""
    return {id(r.buffer) for r in block.writes}


def read_buffers(block: T.Block) -> dict[int, T.Buffer]:
    """The buffers a block reads, by id: declared, or loaded in its body or init."""
    loaded = [ld.buffer for part in (block.init, block.body) for ld in iter_loads(part)]
    return {id(b): b for b in [r.buffer for r in block.reads] + loaded}


def reads(block: T.Block) -> set[int]:
    """The buffers (by id) a block reads."""
    return set(read_buffers(block))


def shares_loop(a: Located, b: Located) -> bool:
    """Whether some loop encloses both statements."""
    return bool(common_loops(a, b))


@dataclass
class Scope:
    """The blocks directly under one enclosing block, in program order."""

    parent: Located
    members: list[Located]

    def position(self, block: T.Block) -> int:
        return next(k for k, loc in enumerate(self.members) if loc.stmt is block)

    def writers(self, buffer: T.Buffer) -> list[Located]:
        return [loc for loc in self.members if id(buffer) in writes(loc.stmt)]

    def readers(self, buffer: T.Buffer) -> list[Located]:
        return [loc for loc in self.members if id(buffer) in reads(loc.stmt)]

    def before(self, a: Located, b: Located) -> bool:
        """Whether block `a` runs entirely before block `b` starts."""
        return self.position(a.stmt) < self.position(b.stmt) and not shares_loop(a, b)

    def names(self) -> set[str]:
        return {loc.stmt.name for loc in self.members} | {self.parent.stmt.name}


def scope_of(func: T.PrimFunc, loc: Located) -> Scope | None:
    """The scope a located block or loop belongs to; None for the root block."""
    parent = enclosing_block(loc)
    if parent is None:
        return None
    members = [
        x
        for x in walk(func.body)
        if isinstance(x.stmt, T.Block)
        and x.stmt is not parent.stmt
        and (enclosing_block(x) or x).stmt is parent.stmt
    ]
    return Scope(parent, members)


def is_param(func: T.PrimFunc, buffer: T.Buffer) -> bool:
    return any(b is buffer for b in func.buffers)


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_<k>` with the first k that is free."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def common_loops(a: Located, b: Located) -> list[T.For]:
    """The loops that enclose both statements."""
    found = []
    for x, y in zip(a.path, b.path):
        if x[0] is not y[0] or x[1:] != y[1:]:
            break
        if isinstance(x[0], T.For):
            found.append(x[0])
    return found


def under(loc: Located, stmt: T.Stmt) -> bool:
    """Whether `stmt` is an ancestor of the located statement."""
    return any(parent is stmt for parent, _, _ in loc.path)
