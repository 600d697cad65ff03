"""The ONNX node-test pass count must not fall below the floor in floor.json, and the
harness must classify every kind of outcome (pass, unsupported, wrong, crash, timeout)."""

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conformance import harness

FLOOR = json.loads((Path(__file__).with_name("floor.json")).read_text())


@pytest.mark.parametrize("mode", sorted(FLOOR))
def test_pass_count_stays_above_floor(mode):
    entry = FLOOR[mode]
    every = harness.collect()
    if len(every) != harness.TOTAL_CASES:  # the floors count the cases of one onnx release
        pytest.skip(
            f"floor.json was measured on {harness.TOTAL_CASES} node tests; onnx "
            f"{onnx.__version__} ships {len(every)}"
        )
    cases = harness.every_kth(every, None if entry["cases"] == "all" else int(entry["cases"]))
    summary = harness.summarize(harness.run_cases(cases, mode, jobs=2), mode)
    groups = "\n".join(
        f"  {g['cases']:4d} {g['status']}: {g['message']}" for g in summary["failure_groups"][:15]
    )
    assert summary["pass"] >= entry["floor"], (
        f"{summary['pass']}/{summary['cases']} node tests pass in {mode} mode, below the floor "
        f"of {entry['floor']} in floor.json; failures:\n{groups}"
    )


# -- classification on hand-made cases -------------------------------------------------------


def _case(name, nodes, expected, opsets=(("", 17),), out_dtype=TensorProto.FLOAT):
    """A node-test-like case: one float input `x` [2, 3] -> output `y`."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", out_dtype, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return SimpleNamespace(
        name=name, model=model, data_sets=[([x], [expected(x)])], rtol=1e-3, atol=1e-7
    )


def _passthrough(name="test_passthrough", expected=lambda x: x):
    """A graph whose output is its input: imports with no converter at all."""
    graph_case = _case(name, [], expected)
    graph_case.model.graph.output[0].name = "x"
    return graph_case


def test_unsupported_op_is_counted_by_op_type():
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    case = _case("test_frob", [node], lambda x: x, opsets=(("", 17), ("com.example", 1)))
    (result,) = harness.run_cases([case], jobs=1)
    assert (result.status, result.ops) == ("unsupported", ("com.example.Frobnicate",))
    summary = harness.summarize([result], "reference")
    assert summary["unsupported_ops"] == {"com.example.Frobnicate": 1}
    assert summary["counts"] == {"unsupported": 1}


def test_pass_and_wrong_result():
    good = _passthrough()
    bad = _passthrough("test_wrong", expected=lambda x: x + 1)
    results = harness.run_cases([good, bad], jobs=2)
    assert [r.status for r in results] == ["pass", "wrong result"]
    assert "6/6 elements differ" in results[1].detail


def test_broken_model_is_an_import_error():
    case = _passthrough("test_broken")
    case.model.graph.output[0].name = "nowhere"
    assert harness.run_case(case).status == "import error"


@pytest.mark.parametrize(
    "execute, status, detail",
    [
        (lambda inputs: 1 / 0, "crash", "run: ZeroDivisionError"),
        (lambda inputs: os._exit(3), "crash", "worker died (exit code 3)"),
        (lambda inputs: time.sleep(60), "timeout", "over 1 s"),
    ],
    ids=["exception", "dead-worker", "alarm"],
)
def test_failures_of_the_executor(monkeypatch, execute, status, detail):
    monkeypatch.setitem(harness.MODES, "broken", lambda mod: execute)
    results = harness.run_cases([_passthrough(), _passthrough()], "broken", jobs=1, timeout=1)
    assert [r.status for r in results] == [status] * 2
    assert all(r.detail.startswith(detail) for r in results)


def test_hung_worker_is_killed_and_replaced(monkeypatch):
    def ignore_alarm_and_hang(inputs):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(60)

    monkeypatch.setattr(harness, "KILL_GRACE_S", 0.5)
    monkeypatch.setitem(harness.MODES, "hang", lambda mod: ignore_alarm_and_hang)
    results = harness.run_cases([_passthrough(), _passthrough()], "hang", jobs=1, timeout=0.5)
    assert [r.status for r in results] == ["timeout", "timeout"]


@pytest.mark.parametrize(
    "got, want, ok",
    [
        (np.float32([1.0, np.nan]), np.float32([1.0005, np.nan]), True),
        (np.float32([1.0]), np.float32([1.01]), False),
        (np.float32([1.0]), np.float64([1.0]), False),
        (np.int64([3]), np.int64([3]), True),
        (np.int64([3]), np.int64([4]), False),
        (np.array(["a"], dtype=object), np.array(["a"], dtype=object), True),
        ([np.float32([1.0])], [np.float32([1.0])], True),
        (np.float32([1.0]), [np.float32([1.0])], False),
        # near zero, rounding of the largest magnitude (54: 4 ulps = 2.6e-5) is not an error
        (np.float32([54.0, 0.0]), np.float32([54.0, 1.9e-7]), True),
        (np.float32([54.0, 0.0]), np.float32([54.0, 1e-5]), True),
        (np.float32([54.0, 0.0]), np.float32([54.0, 5e-5]), False),
        (np.float64([54.0, 0.0]), np.float64([54.0, 1.9e-7]), False),
    ],
)
def test_compare_value(got, want, ok):
    assert (harness.compare_value(got, want, rtol=1e-3, atol=1e-7) == "") == ok


def test_bfloat16_outputs_are_compared_to_bfloat16_rounding():
    """Expected bfloat16 values (held as float32) differ by a bfloat16 unit where the data
    accumulated in bfloat16: within 4 of them at the largest magnitude, not beyond."""
    import ml_dtypes
    from onnx import numpy_helper

    want = np.array([0.37695312, 1.0], ml_dtypes.bfloat16)
    proto = numpy_helper.from_array(want)
    for stored in (want, proto):
        eps = harness.stored_eps(stored)
        assert eps == 2.0**-7
        assert harness.compare_value(np.float32([0.375, 1.0]), harness.as_numpy(stored),
                                     1e-3, 1e-7, eps) == ""
        assert harness.compare_value(np.float32([0.3, 1.0]), harness.as_numpy(stored),
                                     1e-3, 1e-7, eps) != ""
    assert harness.stored_eps(np.float32([1.0])) is None


def test_sample_is_deterministic_and_spread():
    cases = harness.collect(filter_="test_add", sample=4)
    names = [c.name for c in cases]
    assert names == sorted(names) and len(names) == 4
    assert names == [c.name for c in harness.collect(filter_="test_add", sample=4)]
    assert isinstance(cases[0].model, onnx.ModelProto)
