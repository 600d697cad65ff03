"""Measuring candidates: timed in a worker of their own, checked against the default
schedule; a candidate that computes something else, crashes or hangs is recorded as failed
and the measurement goes on."""

import functools
import time

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.api import lower
from tcc.frontend.onnx import from_onnx
from tcc.lower.passes import run_pipeline
from tcc.lower.rules import schedule_prim_func
from tcc.rt.kernels import load_cpu_library
from tcc.target import parse_target
from tcc.tune.apply import replay
from tcc.tune.measure import Worker, _time_calls, build, concrete_inputs, measure
from tests.tune.failing_work import crash_on, hang_on
from tests.tune.test_apply import _hand_record, _lowered


def _task():
    lowered, target = _lowered()
    (func,) = lowered.prim_funcs.values()
    return func, target


def _default(func, target: str):
    return schedule_prim_func(func, parse_target(target))


# Long enough that a sound candidate finishes on a loaded 2-core machine (at 2 s one did
# not, and was recorded as a second timeout), short enough for the planted hang.
TIMEOUT = 6.0

def test_candidates_are_timed_and_checked_against_the_default():
    func, target = _task()
    default = _default(func, target)
    hand = replay(func, _hand_record(func, target).trace)
    base, (tuned, same) = measure(default, [hand, default], {"n": 64}, target, repeats=5)
    assert base.status == tuned.status == "ok", tuned.error
    assert len(tuned.seconds) == 5 and all(0 < s < 1 for s in tuned.seconds)
    # each is timed beside the default, repeat by repeat
    assert len(tuned.baseline) == 5 and all(0 < s < 1 for s in tuned.baseline)
    assert base.baseline == () and base.ratio() is None
    # the default against itself: paired too (how close the ratio is to 1 is a matter of the
    # machine's load, not something a test under load can hold it to)
    assert same.status == "ok" and len(same.baseline) == 5 and same.ratio() > 0


def test_a_candidate_with_another_result_is_recorded_as_failed():
    """A kernel of the same signature that computes Sigmoid where the task has Relu."""
    func, target = _task()
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [helper.make_tensor("w", TP.FLOAT, [16, 8], np.ones(128).tolist())])
    other = lower(run_pipeline(from_onnx(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)]))))
    (wrong,) = other.prim_funcs.values()
    _, (result,) = measure(_default(func, target), [_default(wrong, target)],
                           {"n": 8}, target)
    assert result.status == "failed"
    assert result.error.startswith("wrong result: argument 2: "), result.error


def test_a_crashing_or_hanging_candidate_is_a_failed_measurement_and_the_next_one_runs():
    func, target = _task()
    default = _default(func, target)
    hand = replay(func, _hand_record(func, target).trace)
    bad = build(hand, target)
    for hook, words in ((crash_on, "crash: the worker died (signal SIGKILL)"),
                        (hang_on, "timeout: still running after 6 s; killed")):
        start = time.perf_counter()
        base, (failed, after) = measure(default, [hand, default], {"n": 4}, target,
                                        timeout=TIMEOUT, work=functools.partial(hook, bad))
        assert (failed.status, failed.error) == ("failed", words)
        assert base.status == after.status == "ok"
        assert time.perf_counter() - start < 30


def test_the_worker_runs_parallel_loops_on_threads_even_after_this_process_did():
    """The worker is a fresh process: a parallel kernel asked for two threads there runs,
    where a forked child of this process (which has started OpenMP's threads) would wait
    forever."""
    func, target = _task()
    default = _default(func, target)
    shared = build(default, target)
    with load_cpu_library(shared) as lib:  # OpenMP started here
        lib.call("candidate", concrete_inputs(default, {"n": 64}))
    worker = Worker()
    try:
        status, result = worker.run(_time_calls, (shared, concrete_inputs(default, {"n": 64}),
                                                  1, 2), 30)
    finally:
        worker.close()
    assert status == "ok", result


def test_inputs_follow_the_shapes_given():
    func, _ = _task()
    x, w, *rest = concrete_inputs(func, {"n": 5})
    assert x.shape == (5, 16) and w.shape == (16, 8)
    assert concrete_inputs(func, {})[0].shape == (1, 16)  # a size not given is 1
    np.testing.assert_array_equal(concrete_inputs(func, {"n": 5})[0], x)  # seeded


def test_a_worker_that_cannot_start_is_a_one_line_error(monkeypatch):
    """Spawn refuses to start a worker from a script without a `__main__` guard (a
    RuntimeError of many lines): the tune gets one line, and closing the worker after it
    raises nothing."""
    import multiprocessing

    from tcc.ir.errors import TccError

    def refuse(self):
        raise RuntimeError("\n        An attempt has been made to start a new process before "
                           "the\n        current process has finished its bootstrapping phase.")

    monkeypatch.setattr(multiprocessing.get_context("spawn").Process, "start", refuse)
    worker = Worker()
    with pytest.raises(TccError) as info:
        worker.run(print, (), 1.0)
    assert str(info.value) == ("the measurement worker could not start: An attempt has been "
                               "made to start a new process before the")
    worker.close()
