"""Choosing which candidates of a task to measure next.

`RandomSearch` draws points of the task's space uniformly (each decision drawn with its
probabilities). `EvolutionarySearch`, once the cost model is trained, evolves a population
as MetaSchedule does: the best measured points and fresh random ones, then a few
generations of mutations (one decision changed) of parents picked by the model's score,
and proposes the best-scored points not yet measured, with a share of random points for
exploration. Before the model is trained it draws like `RandomSearch`. Both skip points
measured before (by their decisions) and points that realize a kernel measured before
(by its structural hash).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tcc.ir.tir import PrimFunc
from tcc.tune.cost_model import CostModel
from tcc.tune.features import features
from tcc.tune.space import Candidate, mutate, realize, realize_many

DRAW_TRIES = 4  # draws per wanted candidate before a space counts as exhausted
POPULATION = 48
GENERATIONS = 3
PARENTS = 8
EXPLORE = 0.2


def point_key(point: dict) -> tuple:
    return tuple(sorted(point.items()))


@dataclass
class TaskSpace:
    """What the search knows of one task: its kernel, the sizes it is measured at, the
    points and kernels measured (with their latencies; None: failed) and realized ones."""

    func: PrimFunc
    target: object
    shapes: dict
    jobs: int = 1  # processes that realize a batch of points
    measured: dict = field(default_factory=dict)  # point key -> relative latency | None
    measured_kernels: set = field(default_factory=set)  # structural hashes
    realized: dict = field(default_factory=dict)  # point key -> Candidate
    _features: dict = field(default_factory=dict)  # kernel hash -> features

    def realize(self, point: dict) -> Candidate:
        key = point_key(point)
        if key not in self.realized:
            self.realized[key] = realize(self.func, self.target, point)
        return self.realized[key]

    def realize_all(self, points: list[dict]) -> list[Candidate]:
        """`realize` of each point, the new ones together (`space.realize_many`)."""
        new = list({point_key(p): p for p in points if point_key(p) not in self.realized}.values())
        for p, c in zip(new, realize_many(self.func, self.target, new, self.jobs)):
            self.realized[point_key(p)] = c
        return [self.realized[point_key(p)] for p in points]

    def draw_all(self, rng: random.Random, count: int) -> list[Candidate]:
        """`count` points drawn at random, realized together."""
        seeds = [rng.getrandbits(32) for _ in range(count)]
        drawn = realize_many(self.func, self.target, [None] * count, self.jobs, seeds)
        for c in drawn:
            self.realized.setdefault(point_key(c.point), c)
        return drawn

    def draws(self, rng: random.Random, count: int, total: int):
        """Up to `total` random candidates, realized `count` at a time as they are taken."""
        count = max(1, count)
        while total > 0:
            yield from self.draw_all(rng, min(count, total))
            total -= count

    def features(self, c: Candidate):
        if c.key not in self._features:
            self._features[c.key] = features(c.scheduled, self.shapes)
        return self._features[c.key]

    def is_new(self, c: Candidate) -> bool:
        return point_key(c.point) not in self.measured and c.key not in self.measured_kernels

    def best_measured(self, n: int) -> list[Candidate]:
        ok = sorted((s, k) for k, s in self.measured.items() if s is not None)
        return [self.realize(dict(k)) for _, k in ok[:n]]


def _fresh(space: TaskSpace, candidates, wanted: int) -> list[Candidate]:
    """Up to `wanted` candidates from `candidates` that are new, one per kernel."""
    out, kernels = [], set()
    if wanted <= 0:
        return out
    for c in candidates:
        if space.is_new(c) and c.key not in kernels:
            out.append(c)
            kernels.add(c.key)
            if len(out) == wanted:
                break
    return out


class RandomSearch:
    name = "random"

    def propose(self, space: TaskSpace, model: CostModel, rng: random.Random,
                count: int) -> list[Candidate]:
        return _fresh(space, space.draws(rng, count, DRAW_TRIES * count), count)


class EvolutionarySearch:
    name = "evolutionary"

    def propose(self, space: TaskSpace, model: CostModel, rng: random.Random,
                count: int) -> list[Candidate]:
        if not model.trained:
            return RandomSearch().propose(space, model, rng, count)
        population = {c.key: c for c in space.best_measured(PARENTS)}
        for c in space.draw_all(rng, POPULATION // 2):
            population.setdefault(c.key, c)
        seen = dict(population)
        for _ in range(GENERATIONS):
            members = list(population.values())
            scores = model.predict([space.features(c) for c in members])
            points = []
            for _ in range(POPULATION):
                a, b = rng.randrange(len(members)), rng.randrange(len(members))
                parent = members[a if scores[a] >= scores[b] else b]
                point = mutate(parent, rng)
                if point is not None:
                    points.append(point)
            children = {}
            for child in space.realize_all(points):
                children.setdefault(child.key, child)
            seen.update(children)
            pool = list({**population, **children}.values())
            pool_scores = model.predict([space.features(c) for c in pool])
            ranked = sorted(range(len(pool)), key=lambda i: -pool_scores[i])
            population = {pool[i].key: pool[i] for i in ranked[:POPULATION]}
        candidates = list(seen.values())
        scores = model.predict([space.features(c) for c in candidates])
        ranked = [candidates[i] for i in sorted(range(len(candidates)), key=lambda i: -scores[i])]
        explore = max(1, round(EXPLORE * count)) if count > 1 else 0
        chosen = _fresh(space, ranked, count - explore)
        taken = {c.key for c in chosen}
        extra = (c for c in space.draws(rng, count - len(chosen), DRAW_TRIES * count)
                 if c.key not in taken)
        chosen += _fresh(space, extra, count - len(chosen))
        return chosen


SEARCHES = {"evolutionary": EvolutionarySearch, "random": RandomSearch}
