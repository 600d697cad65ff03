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


def _pid_after(seconds: float) -> int:
    import os
    import time

    time.sleep(seconds)
    return os.getpid()


def test_meanwhile_runs_once_in_the_caller_while_the_children_work():
    import os
    import time

    ran = []
    t0 = time.perf_counter()
    pids = forked_map(_pid_after, [0.5, 0.5], jobs=2,
                      meanwhile=lambda: ran.append((os.getpid(), time.perf_counter() - t0)))
    assert os.getpid() not in pids  # the items ran in children
    assert len(ran) == 1 and ran[0][0] == os.getpid()
    assert ran[0][1] < 0.5  # before the children's items were done
    serial = []
    assert forked_map(_square, [3], jobs=2, meanwhile=lambda: serial.append(1)) == [9]
    assert serial == [1]
