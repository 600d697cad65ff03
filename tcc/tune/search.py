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
from tcc.tune.space import Candidate, mutate, realize, sample

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
    measured: dict = field(default_factory=dict)  # point key -> seconds | None
    measured_kernels: set = field(default_factory=set)  # structural hashes
    realized: dict = field(default_factory=dict)  # point key -> Candidate
    _features: dict = field(default_factory=dict)  # kernel hash -> features

    def realize(self, point: dict) -> Candidate:
        key = point_key(point)
        if key not in self.realized:
            self.realized[key] = realize(self.func, self.target, point)
        return self.realized[key]

    def draw(self, rng: random.Random) -> Candidate:
        c = sample(self.func, self.target, rng)
        self.realized.setdefault(point_key(c.point), c)
        return c

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
        return _fresh(space, (space.draw(rng) for _ in range(DRAW_TRIES * count)), count)


class EvolutionarySearch:
    name = "evolutionary"

    def propose(self, space: TaskSpace, model: CostModel, rng: random.Random,
                count: int) -> list[Candidate]:
        if not model.trained:
            return RandomSearch().propose(space, model, rng, count)
        population = {c.key: c for c in space.best_measured(PARENTS)}
        for _ in range(POPULATION // 2):
            c = space.draw(rng)
            population.setdefault(c.key, c)
        seen = dict(population)
        for _ in range(GENERATIONS):
            members = list(population.values())
            scores = model.predict([space.features(c) for c in members])
            children = {}
            for _ in range(POPULATION):
                a, b = rng.randrange(len(members)), rng.randrange(len(members))
                parent = members[a if scores[a] >= scores[b] else b]
                point = mutate(parent, rng)
                if point is not None:
                    child = space.realize(point)
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
        extra = (c for c in (space.draw(rng) for _ in range(DRAW_TRIES * count))
                 if c.key not in taken)
        chosen += _fresh(space, extra, count - len(chosen))
        return chosen


SEARCHES = {"evolutionary": EvolutionarySearch, "random": RandomSearch}
