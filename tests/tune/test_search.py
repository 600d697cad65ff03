"""The search's parts: features of every kind of kernel, a cost model that learns an order,
and searches that propose only what was not measured, until a space is used up."""

from __future__ import annotations

import random

import numpy as np

from tcc.lower.rules.cpu import Machine
from tcc.tune.cost_model import CostModel
from tcc.tune.features import LENGTH, features
from tcc.tune.search import EvolutionarySearch, RandomSearch, TaskSpace, point_key
from tcc.tune.space import realize, realize_many, sample
from tests.lower.rules.cpu.rules_cases import CASES, kernels

AVX512 = Machine(vector_bits=512, vector_registers=32, cores=2)


def _kernel(case: str):
    (func,) = kernels(case).values()
    return func


def test_every_kind_of_kernel_gives_a_feature_vector_that_tells_schedules_apart():
    rng = random.Random(0)
    for case in CASES:
        func = _kernel(case)
        vectors = [features(sample(func, AVX512, rng).func, {}) for _ in range(6)]
        assert all(v.shape == (LENGTH,) and np.isfinite(v).all() for v in vectors), case
    matmul = _kernel("matmul")
    serial = realize(matmul, AVX512, {"matmul.threads": 0, "matmul.local": 1})
    parallel = realize(matmul, AVX512, {"matmul.threads": 1, "matmul.local": 1})
    assert not np.array_equal(features(serial.func, {}), features(parallel.func, {}))


def test_the_cost_model_learns_to_order_candidates():
    rng = np.random.default_rng(0)
    model = CostModel()
    rows = rng.random((200, LENGTH)).astype(np.float32)
    speed = 1 + 3 * rows[:, 5] + rows[:, 7] ** 2  # what a measurement would find
    for row, s in zip(rows[:150], speed[:150]):
        model.add(row, 1 / s)  # its latency over the default's
    model.fit()
    predicted = model.predict(list(rows[150:]))
    ranks = np.argsort(np.argsort(predicted)), np.argsort(np.argsort(speed[150:]))
    assert np.corrcoef(*ranks)[0, 1] > 0.8


def test_searches_propose_only_unmeasured_kernels_until_the_space_is_used_up():
    func = _kernel("add_broadcast")  # a small space: lanes x threads x rule order
    for search in (RandomSearch(), EvolutionarySearch()):
        space, model, rng, seen = TaskSpace(func, AVX512, {}), CostModel(), random.Random(0), set()
        for _ in range(50):
            batch = search.propose(space, model, rng, 4)
            if not batch:
                break
            for c in batch:
                assert c.key not in seen
                seen.add(c.key)
                space.measured[point_key(c.point)] = 1e-6
                space.measured_kernels.add(c.key)
                model.add(space.features(c), 1.0)
            model.fit()
        else:
            raise AssertionError(f"{search.name}: the space was never used up")
        assert len(seen) >= 3


def test_a_search_proposes_at_most_the_candidates_asked_for():
    """A round near the end of a tune asks for fewer than a batch (one, say); proposing more
    would overrun --trials."""
    func = _kernel("matmul")
    for search in (RandomSearch(), EvolutionarySearch()):
        space, model, rng = TaskSpace(func, AVX512, {}), CostModel(), random.Random(0)
        while not model.trained:
            for c in search.propose(space, model, rng, 8):
                space.measured[point_key(c.point)] = 1.0
                space.measured_kernels.add(c.key)
                model.add(space.features(c), rng.uniform(0.5, 2))
            model.fit()
        for count in (1, 2, 3, 5):
            assert 1 <= len(search.propose(space, model, rng, count)) <= count, (search.name, count)


def test_candidates_realized_by_a_pool_are_those_realized_here():
    func = _kernel("matmul")
    seeds = list(range(10))
    here = realize_many(func, AVX512, [None] * 10, jobs=1, seeds=seeds)
    pooled = realize_many(func, AVX512, [None] * 10, jobs=2, seeds=seeds)
    assert [c.key for c in pooled] == [c.key for c in here]
    assert [c.trace.as_json() for c in pooled] == [c.trace.as_json() for c in here]
    points = [c.point for c in here]
    again = realize_many(func, AVX512, points, jobs=2)
    assert [c.key for c in again] == [c.key for c in here]
    assert len({c.key for c in here}) > 1  # the draws differ
