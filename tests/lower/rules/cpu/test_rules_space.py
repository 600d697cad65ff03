"""The default rules as a design space: every choice a rule makes is a labelled sample in
the schedule's trace, the untuned schedule is the point where each takes its default, and
every other point computes the same results."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.ir.structural import structural_equal
from tcc.lower.rules import finish_schedule, schedule_kernel, schedule_prim_func
from tcc.lower.rules.cpu import Machine
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.sampling import Decisions
from tcc.lower.schedule.trace import Trace

from .rules_cases import all_kernels, run_both

AVX512 = Machine(vector_bits=512, vector_registers=32, cores=2)


def _samples(sch: Schedule) -> dict[str, object]:
    return {dict(i.attrs)["label"]: i for i in sch.trace.instructions
            if i.kind == "sample_categorical"}


@pytest.fixture(scope="module", name="all_kernels")
def all_kernels_fixture():
    return all_kernels()


def test_every_rule_decides_through_labelled_samples(all_kernels):
    labels = set()
    for func in all_kernels.values():
        labels |= {label.rsplit(".", 1)[1] for label in _samples(schedule_kernel(func, AVX512))}
    # the choices of the contraction, row, elementwise and reduction rules and of the driver
    assert {"columns", "rows", "local", "threads", "lanes", "row_group", "rule",
            "whole", "innermost_tile_loop"} <= labels


def test_the_untuned_schedule_is_the_point_of_defaults(all_kernels):
    for name, func in all_kernels.items():
        sch = schedule_kernel(func, AVX512)
        for label, inst in _samples(sch).items():
            assert inst.decision == dict(inst.attrs)["default"], (name, label)
        replayed = Schedule(func)
        Trace.from_json(sch.trace.as_json()).apply(replayed)
        assert structural_equal(finish_schedule(replayed.func),
                                schedule_prim_func(func, AVX512)), name


def test_given_decisions_are_taken_by_label(all_kernels):
    func = all_kernels["matmul_matmul_kernel"]
    rows = _samples(schedule_kernel(func, AVX512))["matmul.rows"]
    candidates = dict(rows.attrs)["candidates"]
    other = next(c for c in candidates if c != candidates[rows.decision])
    chosen = _samples(schedule_kernel(func, AVX512, Decisions({"matmul.rows": other})))
    assert candidates[chosen["matmul.rows"].decision] == other
    # a value that is not a candidate there is ignored: the default is taken
    ignored = _samples(schedule_kernel(func, AVX512, Decisions({"matmul.rows": 10_000})))
    assert ignored["matmul.rows"].decision == rows.decision


@pytest.mark.parametrize("seed", [1, 2])
def test_every_sampled_point_computes_what_the_plain_kernel_does(all_kernels, seed):
    sampled = {}
    for name, func in all_kernels.items():
        sch = schedule_kernel(func, AVX512, Decisions(sample=True, seed=seed))
        sampled[name] = finish_schedule(sch.func)
    changed = sum(not structural_equal(sampled[n], schedule_prim_func(f, AVX512))
                  for n, f in all_kernels.items())
    assert changed >= len(all_kernels) // 2
    for name, want, got in run_both(all_kernels, sampled):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


def _with(func, flags: dict[str, int], point: dict[str, int]) -> Schedule:
    """`func` scheduled with every sample whose label ends in one of `flags` set to it."""
    for _ in range(2):  # a decision may only be offered once another one is taken
        sch = schedule_kernel(func, AVX512, Decisions(point))
        point = {**point, **{label: flags[label.rsplit(".", 1)[1]] for label in _samples(sch)
                             if label.rsplit(".", 1)[1] in flags}}
    return schedule_kernel(func, AVX512, Decisions(point))


def test_a_packed_panel_keeps_results_bit_identical(all_kernels):
    """With the tile loops swapped, the load reused across rows may be copied into a
    contiguous panel per column tile (dense_trans_b's weight is read across its rows): the
    sums keep their order, so the results are the default's bits."""
    packed, defaults = {}, {}
    for name, func in all_kernels.items():
        sch = _with(func, {"columns_outside": 1, "pack": 1}, {})
        if any(i.kind == "cache_read" for i in sch.trace.instructions):
            packed[name] = finish_schedule(sch.func)
            defaults[name] = schedule_prim_func(func, AVX512)
    # not where the panel is contiguous already (batch_matmul's 56 columns are one tile)
    assert set(packed) == {"matmul_matmul_kernel", "dense_trans_b_gemm_kernel"}
    for (name, want, _), (_, got, _) in zip(run_both(defaults, defaults),
                                            run_both(packed, packed)):
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_any_tile_loop_moved_innermost_keeps_results_bit_identical(all_kernels):
    """Which tile loop runs innermost (`innermost_tile_loop`) decides only the order the
    tiles are visited in; each tile sums in the same order, so every choice computes the
    default's bits."""
    moved, defaults = {}, {}
    for name, func in all_kernels.items():
        sample = next((i for label, i in _samples(schedule_kernel(func, AVX512)).items()
                       if label.endswith(".innermost_tile_loop")), None)
        if sample is None:
            continue
        label = dict(sample.attrs)["label"]
        defaults[name] = schedule_prim_func(func, AVX512)
        for n, choice in enumerate(dict(sample.attrs)["candidates"][1:]):
            sch = schedule_kernel(func, AVX512, Decisions({label: choice}))
            moved[f"{name}__{n}"] = finish_schedule(sch.func)
            assert not structural_equal(moved[f"{name}__{n}"], defaults[name])
    assert "batch_matmul_matmul_kernel" in defaults
    assert any("conv2d_nchwc" in name for name in defaults)
    plain = {key: defaults[key.rsplit("__", 1)[0]] for key in moved}
    for key, want, got in run_both(plain, moved):
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w, err_msg=key)
