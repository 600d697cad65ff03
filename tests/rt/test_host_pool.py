"""tcc.rt.host_pool: big blocks lent to a run come back when it ends, unless something
still views them; small ones are NumPy's own; each thread takes back only its own."""

from __future__ import annotations

import threading

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

import tcc
import tcc.rt
from tcc.rt.host_pool import BIG, HostPool
from tcc.rt.tensor import ARENA_ALIGN


def test_a_block_comes_back_when_the_run_ends():
    pool = HostPool()
    a, b = pool.empty(BIG + 1000), pool.empty(BIG + 1000)
    assert a.ctypes.data != b.ctypes.data
    assert a.ctypes.data % ARENA_ALIGN == 0 and a.nbytes == BIG + 1000
    first = {a.ctypes.data, b.ctypes.data}
    del a, b
    pool.take_back()
    again = {pool.empty(BIG + 1000).ctypes.data, pool.empty(BIG).ctypes.data}
    assert again == first


def test_within_a_run_a_block_nothing_views_serves_the_next_request():
    """A Loop's iterations allocate their arenas again and again in one run: each takes the
    block the last one let go of, so the run does not hold them all."""
    pool = HostPool()
    addresses = set()
    for _ in range(10):
        block = pool.empty(BIG)
        addresses.add(block.ctypes.data)
        del block
    assert len(addresses) == 1
    assert len(pool._local.lent) == 1


def test_a_block_still_viewed_is_not_lent_again():
    pool = HostPool()
    kept = pool.empty(BIG).view(np.float32)[:10]  # a view the caller keeps, as an output
    kept[:] = 7
    pool.take_back()
    other = pool.empty(BIG)
    other[:] = 0
    assert other.ctypes.data != kept.ctypes.data
    np.testing.assert_array_equal(kept, 7)


def test_a_block_more_than_twice_the_request_is_not_lent():
    pool = HostPool()
    big = pool.empty(4 * BIG)
    address = big.ctypes.data
    del big
    pool.take_back()
    assert pool.empty(BIG).ctypes.data != address


def test_small_blocks_are_numpys():
    pool = HostPool()
    small = pool.empty(BIG // 2)
    assert small.ctypes.data % ARENA_ALIGN == 0
    pool.take_back()
    assert pool._kept == []


def test_a_thread_takes_back_only_what_it_was_lent():
    pool = HostPool()
    lent, go, done = [], threading.Event(), threading.Event()

    def other():
        lent.append(pool.empty(BIG))  # still in this thread's run
        go.set()
        done.wait(5)

    t = threading.Thread(target=other)
    t.start()
    go.wait(5)
    address = lent[0].ctypes.data
    del lent[0]  # no view left, but the other thread's run has not ended
    pool.take_back()
    assert pool.empty(BIG).ctypes.data != address
    done.set()
    t.join()


def test_an_output_the_caller_keeps_is_not_overwritten_by_the_next_run(tmp_path):
    """The VM's outputs of BIG bytes come from the pool: one kept across runs must not be
    lent to the next run."""
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 256])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, ["n", 256])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    tcc.compile(model, output=tmp_path / "m.tvmpack")
    rng = np.random.default_rng(0)
    with tcc.rt.load(tmp_path / "m.tvmpack") as m:
        xs = [rng.standard_normal((128, 256)).astype(np.float32) for _ in range(4)]
        ys = [m["main"](x)[0] for x in xs]
        for x, y in zip(xs, ys):
            np.testing.assert_allclose(y, -np.tanh(x), rtol=1e-6, atol=1e-6)
