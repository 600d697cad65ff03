"""forked_map: the same results in order, by forked processes or, where it may not start any
(inside a pool's daemonic worker), by the calling process."""

from __future__ import annotations

import multiprocessing

from tcc.forked import forked_map


def _square(x: int) -> int:
    return x * x


def _map_in_worker(n: int) -> list:
    return forked_map(_square, list(range(n)), jobs=2)


def test_results_come_back_in_order():
    assert forked_map(_square, list(range(10)), jobs=2) == [x * x for x in range(10)]


def test_inside_a_pool_worker_the_map_runs_in_that_worker():
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_map_in_worker, (6,)) == [x * x for x in range(6)]


def _gen0_threshold(_) -> int:
    import gc

    return gc.get_threshold()[0]


def test_children_collect_garbage_less_often_and_the_caller_keeps_its_setting():
    import gc

    from tcc.forked import CHILD_GC_THRESHOLD

    before = gc.get_threshold()
    assert forked_map(_gen0_threshold, [0, 1, 2], jobs=2) == [CHILD_GC_THRESHOLD] * 3
    assert gc.get_threshold() == before


def _pid_once(marker: str) -> int:
    """This child's pid, once `marker` exists (0 if it never does within 30 s)."""
    import os
    import time

    for _ in range(3000):
        if os.path.exists(marker):
            return os.getpid()
        time.sleep(0.01)
    return 0


def test_meanwhile_runs_once_in_the_caller_while_the_children_work(tmp_path):
    import os

    marker = tmp_path / "meanwhile-ran"
    ran = []

    def meanwhile():
        ran.append(os.getpid())
        marker.touch()  # the children finish only once this has run

    pids = forked_map(_pid_once, [str(marker)] * 2, jobs=2, meanwhile=meanwhile)
    assert 0 not in pids and os.getpid() not in pids  # children, released by meanwhile
    assert ran == [os.getpid()]
    serial = []
    assert forked_map(_square, [3], jobs=2, meanwhile=lambda: serial.append(1)) == [9]
    assert serial == [1]
