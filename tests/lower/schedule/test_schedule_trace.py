"""Traces: the recorded instructions, their JSON form, replay to an equal function, changed
decisions, and the errors of malformed or misapplied traces."""

from __future__ import annotations

import json

import pytest

from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.lower.schedule import Schedule, ScheduleError, Trace
from tests.lower.schedule.cases import add2d, matmul


def tiled_matmul(seed: int = 0) -> Schedule:
    sch = Schedule(matmul(), seed=seed)
    block = sch.get_block("matmul")
    i, j, k = sch.get_loops(block)
    tiles = sch.sample_perfect_tile(i, n=2, max_innermost_factor=4)
    i0, i1 = sch.split(i, tiles)
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    sch.annotate(block, "unroll_depth", sch.get(sch.sample_categorical([0, 16], [0.5, 0.5])))
    return sch


EXPECTED_JSON = {
    "format": "tcc-trace",
    "version": 1,
    "instructions": [
        {"kind": "get_block", "inputs": [], "attrs": {"name": "matmul"}, "outputs": ["b0"]},
        {"kind": "get_loops", "inputs": ["b0"], "attrs": {}, "outputs": ["l0", "l1", "l2"]},
        {"kind": "sample_perfect_tile", "inputs": ["l0"],
         "attrs": {"n": 2, "max_innermost_factor": 4}, "outputs": ["v0", "v1"],
         "decision": "TILES"},
        {"kind": "split", "inputs": ["l0", ["v0", "v1"]], "attrs": {}, "outputs": ["l3", "l4"]},
        {"kind": "split", "inputs": ["l1", [None, 4]], "attrs": {}, "outputs": ["l5", "l6"]},
        {"kind": "reorder", "inputs": ["l3", "l5", "l2", "l4", "l6"], "attrs": {}, "outputs": []},
        {"kind": "parallel", "inputs": ["l3"], "attrs": {}, "outputs": []},
        {"kind": "vectorize", "inputs": ["l6"], "attrs": {}, "outputs": []},
        {"kind": "sample_categorical", "inputs": [],
         "attrs": {"candidates": [0, 16], "probs": [0.5, 0.5], "default": 0, "label": ""},
         "outputs": ["v2"],
         "decision": "PICK"},
        {"kind": "annotate", "inputs": ["b0"], "attrs": {"key": "unroll_depth", "value": "VALUE"},
         "outputs": []},
    ],
}  # fmt: skip


def test_the_json_form_names_handles_in_order_of_creation():
    sch = tiled_matmul()
    got = sch.trace.as_json()
    tiles, pick = got["instructions"][2]["decision"], got["instructions"][8]["decision"]
    assert len(tiles) == 2 and tiles[0] * tiles[1] == 6 and tiles[1] <= 4
    expected = json.loads(
        json.dumps(EXPECTED_JSON)
        .replace('"TILES"', json.dumps(tiles))
        .replace('"PICK"', str(pick))
        .replace('"VALUE"', str([0, 16][pick]))
    )
    assert got == expected


def test_the_text_form_reads_like_the_calls():
    sch = Schedule(add2d())
    i, j = sch.get_loops(sch.get_block("add"))
    sch.split(j, sch.sample_perfect_tile(j, n=2, decision=[7, 1]))
    sch.bind(i, "blockIdx.x")
    assert str(sch.trace) == "\n".join(
        [
            "b0 = sch.get_block(name='add')",
            "l0, l1 = sch.get_loops(b0)",
            "v0, v1 = sch.sample_perfect_tile(l1, n=2, max_innermost_factor=16, decision=[7, 1])",
            "l2, l3 = sch.split(l1, [v0, v1])",
            "sch.bind(l0, thread='blockIdx.x')",
        ]
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_trace_round_trips_through_json_and_replays_to_an_equal_function(seed):
    sch = tiled_matmul(seed)
    trace = Trace.from_json(json.loads(json.dumps(sch.trace.as_json())))
    assert trace == sch.trace
    fresh = Schedule(matmul(), seed=seed + 100)  # replay uses the decisions, not the seed
    trace.apply(fresh)
    assert structural_equal(fresh.func, sch.func)
    assert print_prim_func("f", fresh.func) == print_prim_func("f", sch.func)
    assert fresh.trace == sch.trace


def test_a_changed_decision_replays_to_the_schedule_it_describes():
    trace = tiled_matmul().trace
    index = next(
        k for k, inst in enumerate(trace.instructions) if inst.kind == "sample_perfect_tile"
    )
    mutated = trace.with_decision(index, [3, 2])
    fresh = Schedule(matmul())
    mutated.apply(fresh)
    i0, i1 = fresh.get_loops(fresh.get_block("matmul"))[0::3]
    assert (fresh.get(i0).extent.value, fresh.get(i1).extent.value) == (3, 2)
    with pytest.raises(ScheduleError, match=r"instruction 0 \(get_block\) makes no decision"):
        trace.with_decision(0, 1)


def _entry(kind, inputs=(), attrs=None, outputs=()):
    return {"kind": kind, "inputs": list(inputs), "attrs": attrs or {}, "outputs": list(outputs)}


def _trace(*entries, version=1):
    return {"format": "tcc-trace", "version": version, "instructions": list(entries)}


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "trace: not a tcc-trace object; expected what Trace.as_json gives"),
        (_trace(version=2), "trace: version 2, this tcc reads version 1"),
        ({"format": "tcc-trace", "version": 1, "instructions": {}},
         "trace: 'instructions' is not a list"),
        (_trace(3), "trace: instruction 0 is int, expected an object"),
        (_trace({"inputs": []}), "trace: instruction 0: 'kind' is None, expected a str"),
        (_trace(_entry("split", inputs=[{"a": 1}])),
         "trace: instruction 0: input {'a': 1} is neither a handle nor a number"),
        (_trace(_entry("get_loops", outputs=[1])),
         "trace: instruction 0: outputs [1] are not all handle names"),
    ],
)  # fmt: skip
def test_a_malformed_trace_is_refused(data, message):
    with pytest.raises(ScheduleError) as info:
        Trace.from_json(data)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "entries, message",
    [
        ([_entry("get_loops", inputs=["b7"])],
         "trace: instruction 0 (get_loops): uses 'b7' before anything makes it"),
        ([_entry("explode")], "trace: instruction 0 (explode): no schedule instruction has that name"),
        ([_entry("__init__")],
         "trace: instruction 0 (__init__): no schedule instruction has that name"),
        ([_entry("get_block", attrs={"name": "add"}, outputs=["b0"]),
          _entry("get_loops", inputs=["b0"], outputs=["l0", "l1", "l2"])],
         "trace: instruction 1 (get_loops): returned 2 handles where the trace has 3; replay "
         "the trace on the function it was made for"),
        ([_entry("get_block", attrs={"name": "matmul"}, outputs=["b0"])],
         "get_block: block 'matmul': no such block"),
    ],
)  # fmt: skip
def test_a_trace_that_does_not_fit_the_function_is_refused(entries, message):
    with pytest.raises(ScheduleError) as info:
        Trace.from_json(_trace(*entries)).apply(Schedule(add2d()))
    assert str(info.value) == message
