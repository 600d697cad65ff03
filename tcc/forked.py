"""Mapping a function over items in forked processes that inherit the items.

The tuner's batches (kernels to build, points to realize) and a model's kernels to compile
(tcc.emit.cpu_kernels) are large Python objects; a forked child inherits them from a
module-level slot, so only an index goes in and only the result comes back. Fork is safe
here because the children run no OpenMP code (the parent may have: it ran the model once),
only Python and LLVM.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence

_BATCH: list = [None, ()]  # the function and the items of the map in progress
# A child's first generation is collected after this many new container objects instead of
# Python's 700: building a kernel allocates IR and llvmlite objects by the hundred thousand,
# most of them freed by reference counting, and the collections cost ResNet-50's kernels
# 0.31-0.94 s of 4.1-5.3 s on one core, 0.10-0.15 s with this (gen0 threshold 20,000).
CHILD_GC_THRESHOLD = 20_000


def available_cores() -> int:
    """The cores this process may run on (its affinity mask), the default number of jobs."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _child_start() -> None:
    gc.set_threshold(CHILD_GC_THRESHOLD, *gc.get_threshold()[1:])


def _call(index: int):
    function, items = _BATCH
    return function(items[index])


def forked_map(function: Callable, items: Sequence, jobs: int, serial_below: int = 2,
               chunksize: int = 1, meanwhile: Callable[[], object] | None = None) -> list:
    """[function(item) for item in items], by `jobs` forked processes unless there are
    fewer than `serial_below` items (or one job), when this process does them. `meanwhile`
    runs in this process while the children work (once they are forked, so that no thread
    of it is running at the fork), or after the items when this process does them."""
    import multiprocessing

    if jobs <= 1 or len(items) < serial_below or multiprocessing.current_process().daemon:
        # a pool's worker is daemonic and may start no processes of its own
        out = [function(item) for item in items]
        if meanwhile is not None:
            meanwhile()
        return out

    _BATCH[:] = [function, items]
    # The children's garbage collections need not walk what they inherit (the model, its
    # kernels): frozen, it is out of their view and its pages are not copied on write.
    gc.freeze()
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(items)),
                                                     initializer=_child_start) as pool:
            pending = pool.map_async(_call, range(len(items)), chunksize=chunksize)
            if meanwhile is not None:
                meanwhile()
            return pending.get()
    finally:
        gc.unfreeze()
        _BATCH[:] = [None, ()]
