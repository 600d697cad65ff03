"""The thread count of parallel kernels: one rule for the API, `tcc run --threads` and
TCC_NUM_THREADS, the same as the C runtime's (runtime_c/src/module.c)."""

from __future__ import annotations

import os

from tcc.rt.errors import RunInputError
from tcc.rt.format import MAX_THREADS, THREADS_PER_CORE

ENV = "TCC_NUM_THREADS"


def thread_limit() -> int:
    return min(MAX_THREADS, THREADS_PER_CORE * (os.cpu_count() or 1))


def checked_thread_count(n, what: str = "the thread count", error=RunInputError) -> int:
    """`n` as an int in [1, thread_limit()], else `error` naming `what`."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise error(f"{what} must be a positive integer, got {n!r}")
    if n < 1:
        raise error(f"{what} must be at least 1, got {n}")
    limit = thread_limit()
    if n > limit:
        raise error(
            f"{what} is {n}, more than this machine can run: at most {limit} "
            f"({THREADS_PER_CORE} per core on {os.cpu_count() or 1} cores, never above {MAX_THREADS})")
    return n


def env_thread_count() -> int | None:
    """TCC_NUM_THREADS when set (checked), else None."""
    text = os.environ.get(ENV, "")
    if not text:
        return None
    if not text.isascii() or not text.isdigit():
        raise RunInputError(f"{ENV} must be a positive integer, got '{text}'")
    return checked_thread_count(int(text), ENV)
