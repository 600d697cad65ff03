"""Sampling instructions: every perfect tiling and only those, seeded draws, recorded and
checked decisions."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.sampling import Decisions, perfect_tiles
from tests.lower.schedule.cases import matmul, symbolic_matmul


@pytest.mark.parametrize("extent, n, limit", [(12, 3, 4), (7, 2, 16), (1, 3, 1), (16, 1, 16)])
def test_perfect_tiles_are_exactly_the_bounded_factorizations(extent, n, limit):
    brute = {
        t
        for t in itertools.product(range(1, extent + 1), repeat=n)
        if math.prod(t) == extent and t[-1] <= limit
    }
    tiles = perfect_tiles(extent, n, limit)
    assert len(tiles) == len(set(tiles))
    assert set(tiles) == brute


def _tile(seed: int, **kwargs):
    sch = Schedule(matmul(), seed=seed)
    k = sch.get_loops(sch.get_block("matmul"))[2]
    return sch, [sch.get(v) for v in sch.sample_perfect_tile(k, **kwargs)]


def test_the_same_seed_draws_the_same_tiles_and_seeds_differ():
    draws = {tuple(_tile(seed, n=3, max_innermost_factor=4)[1]) for seed in range(20)}
    assert tuple(_tile(5, n=3, max_innermost_factor=4)[1]) == tuple(
        _tile(5, n=3, max_innermost_factor=4)[1]
    )
    assert len(draws) > 1
    for tiles in draws:
        assert math.prod(tiles) == 10 and tiles[-1] <= 4


def test_a_decision_is_taken_as_given_and_recorded():
    sch, tiles = _tile(0, n=2, max_innermost_factor=16, decision=[2, 5])
    assert tiles == [2, 5]
    assert sch.trace.instructions[-1].decision == (2, 5)


@pytest.mark.parametrize("decision", [[3, 4], [10], [1, 10], [0, 10, 1]])
def test_an_impossible_decision_is_refused(decision):
    with pytest.raises(ScheduleError, match=r"decision .* is not 2 positive factors of 10"):
        _tile(0, n=2, max_innermost_factor=5, decision=decision)


def test_tiles_of_a_symbolic_loop_cannot_be_sampled():
    sch = Schedule(symbolic_matmul())
    i = sch.get_loops(sch.get_block("matmul"))[0]
    with pytest.raises(ScheduleError) as info:
        sch.sample_perfect_tile(i, 2)
    assert str(info.value) == (
        "sample_perfect_tile: loop 'i0': extent n is not a constant; split symbolic loops "
        "by fixed factors"
    )


def test_one_tile_larger_than_the_innermost_bound_is_refused():
    with pytest.raises(ScheduleError, match="one tile of 10 exceeds max_innermost_factor=4"):
        _tile(0, n=1, max_innermost_factor=4)


def test_sampled_tiles_drive_a_split():
    sch = Schedule(matmul())
    k = sch.get_loops(sch.get_block("matmul"))[2]
    outer, inner = sch.split(k, sch.sample_perfect_tile(k, n=2, decision=[5, 2]))
    assert (sch.get(outer).extent.value, sch.get(inner).extent.value) == (5, 2)


def test_categorical_follows_its_probabilities_and_decisions():
    sch = Schedule(matmul(), seed=3)
    assert {sch.get(sch.sample_categorical([4, 8, 16], [0.0, 1.0, 0.0])) for _ in range(20)} == {8}
    picks = [sch.get(sch.sample_categorical([1, 2], [0.5, 0.5])) for _ in range(50)]
    assert set(picks) == {1, 2}
    assert sch.get(sch.sample_categorical([1, 2], [0.5, 0.5], decision=1)) == 2
    assert sch.trace.instructions[-1].decision == 1


@pytest.mark.parametrize(
    "candidates, probs, decision, message",
    [
        ([1, 2], [1.0], None, "2 candidates and 1 probabilities"),
        ([1, 2], [-1.0, 2.0], None, "must be non-negative with a positive sum"),
        ([1, 2], [0.5, 0.5], 2, "decision 2 is not an index into 2 candidates"),
        ([1.5], [1.0], None, "candidates .* are not all ints"),
    ],
)
def test_categorical_refuses_bad_arguments(candidates, probs, decision, message):
    sch = Schedule(matmul())
    with pytest.raises(ScheduleError, match=message):
        sch.sample_categorical(candidates, probs, decision=decision)


def test_sampling_uses_only_the_schedule_generator():
    random.seed(1)
    first = _tile(9, n=3, max_innermost_factor=10)[1]
    random.seed(2)
    assert _tile(9, n=3, max_innermost_factor=10)[1] == first


def test_without_a_seed_categorical_samples_take_their_default_or_the_given_decision():
    sch = Schedule(matmul())
    assert [sch.get(sch.sample_categorical([1, 2, 3], [1, 1, 1], default=d)) for d in (0, 2)] == [1, 3]
    given = Schedule(matmul(), decisions=Decisions({"u": 2}))
    assert given.get(given.sample_categorical([1, 2, 3], [1, 1, 1], label="u")) == 2
    assert given.get(given.sample_categorical([1, 2, 3], [1, 1, 1], label="w")) == 1
    with pytest.raises(ScheduleError, match="default 3 is not an index into 3 candidates"):
        sch.sample_categorical([1, 2, 3], [1, 1, 1], default=3)
