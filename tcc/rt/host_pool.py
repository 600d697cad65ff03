"""Host memory for the VM's big tensors and arenas, kept between runs (the counterpart of
runtime_c/src/host_pool.c).

A run allocates its planned arenas and its other tensors afresh, and they die as it ends.
Where those blocks are big and their sizes vary (several arenas, sizes known only at run
time), the C library gives their pages back to the system at the end of each run and maps
them again in the next: MPT's legacy export took about 250 page faults a run in this runtime
(3.3 ms against 1.5 ms for its dynamo export). The pool lends blocks of BIG bytes and more
and takes them back when the run ends, unless something still views them (an output the
caller now owns): a block's NumPy base is referenced by every view of it, so its reference
count says whether one is left. Lent blocks are counted per thread, so runs of one module on
several threads each take back only their own.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from tcc.rt.tensor import aligned_empty

BIG = 1 << 16  # smaller blocks come and go in the C library's own pools
KEPT_BLOCKS = 32


class HostPool:
    def __init__(self):
        self._lock = threading.Lock()
        self._kept: list[np.ndarray] = []  # owned uint8 blocks, free
        self._kept_bytes = 0
        self._live_bytes = 0  # lent and not back
        self._peak_bytes = 0  # the most lent at once: no more than this is kept
        self._local = threading.local()

    def empty(self, nbytes: int) -> np.ndarray:
        """`nbytes` uninitialized bytes at an ARENA_ALIGN boundary (`aligned_empty`), lent to
        this thread's run (`take_back` ends it); a small block is NumPy's own."""
        return aligned_empty(nbytes, allocate=None if nbytes < BIG else self._lend)

    def _lend(self, nbytes: int) -> np.ndarray:
        lent = getattr(self._local, "lent", None)
        if lent is None:
            lent = self._local.lent = []
        self._keep_unviewed(lent)  # a Loop's iterations: one's blocks serve the next
        with self._lock:
            fits = [k for k, b in enumerate(self._kept) if nbytes <= b.nbytes <= 2 * nbytes]
            raw = None
            if fits:
                k = min(fits, key=lambda k: self._kept[k].nbytes)
                raw = self._kept.pop(k)
                self._kept_bytes -= raw.nbytes
        if raw is None:
            raw = np.empty(nbytes, np.uint8)
        with self._lock:
            self._live_bytes += raw.nbytes
            self._peak_bytes = max(self._peak_bytes, self._live_bytes)
        lent.append(raw)
        return raw

    def take_back(self) -> None:
        """End this thread's run: keep each block it was lent that nothing views any more; the
        others are the caller's now (outputs), or garbage once it drops them."""
        lent = getattr(self._local, "lent", None)
        if lent:
            self._keep_unviewed(lent)
            with self._lock:
                self._live_bytes -= sum(raw.nbytes for raw in lent)
            lent.clear()

    def _keep_unviewed(self, lent: list[np.ndarray]) -> None:
        """Move the blocks of `lent` that nothing views any more to the kept ones (or let them
        go, past the pool's bounds)."""
        still = []
        with self._lock:
            for raw in lent:
                # references: the list's, the loop's and getrefcount's argument; more are views
                if sys.getrefcount(raw) > 3:
                    still.append(raw)
                    continue
                self._live_bytes -= raw.nbytes
                if len(self._kept) < KEPT_BLOCKS and self._kept_bytes + raw.nbytes <= self._peak_bytes:
                    self._kept.append(raw)
                    self._kept_bytes += raw.nbytes
        lent[:] = still
