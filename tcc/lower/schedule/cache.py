"""cache_read and cache_write: stage a buffer a block reads or writes through a new buffer
of another storage scope, as functions from the current PrimFunc to the rewritten one.

The cache buffer has the original's shape and is allocated in the enclosing block; the
stage copying it is a block of its own, placed right before (cache_read) or after
(cache_write) the loop nest of the block, which compute_at / reverse_compute_at can then
move into that nest to copy per tile. Both refuse when another block in the same nest
would see the buffer before the copy is taken or made.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.lower.schedule.blocks import error, plain_indices, require_scope
from tcc.lower.schedule.regions import iter_loads
from tcc.lower.schedule.rewrite import map_blocks, replace_buffer
from tcc.lower.schedule.scope import Scope, ancestor, unique_name, writes
from tcc.lower.schedule.state import Located, find_block, replace

STORAGE_SCOPES = ("global", "shared", "local")


def top_level(loc: Located, scope: Scope) -> Located:
    """The statement of the scope's body (a loop nest, usually) that holds `loc`."""
    depth = len(scope.parent.path) + 1
    if isinstance(scope.parent.stmt.body, T.SeqStmt):
        depth += 1
    return ancestor(loc, depth)


def _copy_nest(name: str, src: T.Buffer, dst: T.Buffer) -> T.Stmt:
    """A loop nest around one block copying every element of `src` into `dst`."""
    loops = [E.Var(f"ax{k}") for k in range(len(src.shape))]
    ivs = tuple(
        T.IterVar(E.Var(f"v_ax{k}"), E.const(d), T.IterKind.SPATIAL, v)
        for k, (v, d) in enumerate(zip(loops, src.shape))
    )
    idx = tuple(iv.var for iv in ivs)
    one = E.const(1)
    stmt: T.Stmt = T.Block(
        name,
        ivs,
        (T.BufferRegion(src, tuple((i, one) for i in idx)),),
        (T.BufferRegion(dst, tuple((i, one) for i in idx)),),
        T.BufferStore(dst, E.BufferLoad(src, idx), idx),
    )
    for v, d in reversed(list(zip(loops, src.shape))):
        stmt = T.For(v, E.const(0), E.const(d), T.ForKind.SERIAL, stmt)
    return stmt


def _check_storage_scope(primitive: str, block: T.Block, storage_scope: str) -> None:
    if storage_scope not in STORAGE_SCOPES:
        raise error(
            primitive,
            block,
            f"unknown storage scope {storage_scope!r}; use one of {', '.join(STORAGE_SCOPES)}",
        )


def _region_at(primitive: str, block: T.Block, regions, index: int, what: str) -> T.BufferRegion:
    if not isinstance(index, int) or not 0 <= index < len(regions):
        raise error(
            primitive,
            block,
            f"{what} index {index!r} is out of range; the block {what}s "
            f"{len(regions)} buffer regions",
        )
    return regions[index]


def _with_cache(
    func: T.PrimFunc, loc: Located, scope: Scope, old: T.Buffer, cache: T.Buffer, copy, after
) -> T.PrimFunc:
    """The block accessing `cache` instead of `old`, the copy nest next to the block's
    top-level statement (after it, or before), and `cache` allocated in the scope."""
    block = loc.stmt
    top = top_level(loc, scope)
    redirected = replace_buffer(block, old, cache)
    new_top = map_blocks(top.stmt, lambda b: redirected if b is block else b)
    func = replace(func, top, T.seq(new_top, copy) if after else T.seq(copy, new_top))
    (parent,) = find_block(func, scope.parent.stmt.name)
    grown = dataclasses.replace(parent.stmt, alloc_buffers=(*parent.stmt.alloc_buffers, cache))
    return replace(func, parent, grown)


def fresh_buffer_name(scope: Scope, func: T.PrimFunc, base: str) -> str:
    """`base`, made unique among the function's parameters, the scope's blocks and the
    buffers they allocate."""
    taken = scope.names() | {b.name for b in func.buffers}
    taken |= {b.name for m in [scope.parent, *scope.members] for b in m.stmt.alloc_buffers}
    return unique_name(base, taken)


def _cache_buffer(scope: Scope, func: T.PrimFunc, buf: T.Buffer, storage_scope: str):
    name = fresh_buffer_name(scope, func, f"{buf.name}_{storage_scope}")
    return T.Buffer(name, buf.shape, buf.dtype, storage_scope)


def cache_read(
    func: T.PrimFunc, loc: Located, index: int, storage_scope: str
) -> tuple[T.PrimFunc, str]:
    """Copy the buffer a block reads (its `index`-th read region) into a new buffer of
    `storage_scope` right before the block's loop nest, and make the block read the copy;
    returns the function and the name of the copying block."""
    block: T.Block = loc.stmt
    scope = require_scope("cache_read", func, loc)
    _check_storage_scope("cache_read", block, storage_scope)
    buf = _region_at("cache_read", block, block.reads, index, "read").buffer
    if id(buf) in writes(block):
        raise error(
            "cache_read",
            block,
            f"it also writes '{buf.name}'; use cache_write for a buffer the block updates",
        )
    top = top_level(loc, scope)
    for w in scope.writers(buf):
        if top_level(w, scope).stmt is top.stmt:
            raise error(
                "cache_read",
                block,
                f"block '{w.stmt.name}' writes '{buf.name}' in the same "
                "loop nest, after the copy would be taken",
            )
    cache = _cache_buffer(scope, func, buf, storage_scope)
    copy = _copy_nest(cache.name, buf, cache)
    return _with_cache(func, loc, scope, buf, cache, copy, after=False), cache.name


def cache_write(
    func: T.PrimFunc, loc: Located, index: int, storage_scope: str
) -> tuple[T.PrimFunc, str]:
    """Make a block write (its `index`-th write region) into a new buffer of
    `storage_scope`, copied to the original buffer right after the block's loop nest;
    returns the function and the name of the copying block."""
    block: T.Block = loc.stmt
    scope = require_scope("cache_write", func, loc)
    _check_storage_scope("cache_write", block, storage_scope)
    region = _region_at("cache_write", block, block.writes, index, "write")
    buf = region.buffer
    _check_whole_write(block, region)
    other = next((w for w in scope.writers(buf) if w.stmt is not block), None)
    if other is not None:
        raise error(
            "cache_write",
            block,
            f"block '{other.stmt.name}' also writes '{buf.name}'; the "
            "copy back would overwrite its result",
        )
    loaded = any(ld.buffer is buf for ld in iter_loads((block.init, block.body)))
    if loaded and block.init is None:
        raise error(
            "cache_write",
            block,
            f"it reads '{buf.name}' without an init, so it needs the "
            "values already there; the cache would start empty",
        )
    top = top_level(loc, scope)
    for r in scope.readers(buf):
        if r.stmt is not block and top_level(r, scope).stmt is top.stmt:
            raise error(
                "cache_write",
                block,
                f"block '{r.stmt.name}' reads '{buf.name}' in the same "
                "loop nest, before the copy back",
            )
    cache = _cache_buffer(scope, func, buf, storage_scope)
    copy = _copy_nest(cache.name, cache, buf)
    return _with_cache(func, loc, scope, buf, cache, copy, after=True), cache.name


def _check_whole_write(block: T.Block, region: T.BufferRegion) -> None:
    """The copy back writes the whole buffer, so the block must write all of it, one
    element per spatial iteration."""
    indices = [lo for lo, _ in region.ranges]
    index_vars = plain_indices("cache_write", block, region.buffer, indices)
    extents = {id(iv.var): iv.extent for iv in block.iter_vars}
    whole = all(E.prove_equal(ext, 1) for _, ext in region.ranges) and all(
        E.prove_equal(E.as_dim(extents[id(v)]), E.as_dim(E.const(d)))
        for v, d in zip(index_vars, region.buffer.shape)
    )
    if not whole:
        raise error(
            "cache_write",
            block,
            f"it does not write every element of "
            f"'{region.buffer.name}' once per iteration, and the copy back copies them all",
        )
