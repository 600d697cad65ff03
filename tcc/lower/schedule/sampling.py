"""Sampling instructions: the choices a schedule makes, recorded as decisions in its trace.

A sample's outcome is its decision, recorded in the trace; replaying the trace takes the
recorded decision. Where the caller gives none, the schedule's `Decisions` decide: a
decision given for the instruction's label, else the instruction's default (the untuned
schedule the default rules stand for), or a draw from a seeded generator when the schedule
samples. A tuner explores by giving decisions and drawing. Both samplers check a given
decision as strictly as a drawn one, so a mutated or hand-edited trace cannot smuggle in an
impossible choice.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tcc.lower.schedule.state import ScheduleError


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def perfect_tiles(extent: int, n: int, max_innermost_factor: int) -> list[tuple[int, ...]]:
    """Every way to write `extent` as an ordered product of `n` factors whose innermost (last)
    factor is at most `max_innermost_factor`."""
    if n == 1:
        return [(extent,)] if extent <= max_innermost_factor else []
    return [
        (d, *rest)
        for d in _divisors(extent)
        for rest in perfect_tiles(extent // d, n - 1, max_innermost_factor)
    ]


def _check_tile_args(where: str, extent: int, n: int, max_innermost_factor: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"sample_perfect_tile: {where}: n={n!r}; give a positive tile count")
    if not isinstance(max_innermost_factor, int) or max_innermost_factor < 1:
        raise ScheduleError(
            f"sample_perfect_tile: {where}: max_innermost_factor={max_innermost_factor!r}; "
            "give a positive bound"
        )
    if extent < 1:
        raise ScheduleError(f"sample_perfect_tile: {where}: extent {extent} has no tiling")


def sample_perfect_tile(
    rng: random.Random,
    where: str,
    extent: int,
    n: int,
    max_innermost_factor: int,
    decision: Sequence[int] | None,
) -> tuple[int, ...]:
    """The tile sizes: `decision` when given (checked), else one tiling drawn uniformly."""
    _check_tile_args(where, extent, n, max_innermost_factor)
    if decision is not None:
        tiles = tuple(decision)
        product = 1
        for t in tiles:
            product *= t if isinstance(t, int) and t >= 1 else 0
        if len(tiles) != n or product != extent or tiles[-1] > max_innermost_factor:
            raise ScheduleError(
                f"sample_perfect_tile: {where}: decision {list(tiles)} is not {n} positive "
                f"factors of {extent} with the innermost at most {max_innermost_factor}"
            )
        return tiles
    tilings = perfect_tiles(extent, n, max_innermost_factor)
    if not tilings:  # only when n == 1: with more tiles, (extent, ..., 1) qualifies
        raise ScheduleError(
            f"sample_perfect_tile: {where}: one tile of {extent} exceeds "
            f"max_innermost_factor={max_innermost_factor}; sample two or more tiles"
        )
    return rng.choice(tilings)


class Decisions:
    """How a schedule decides the sampling instructions its caller leaves open.

    `given` maps a categorical sample's label to the candidate value to take there (one
    that is not among the candidates is ignored); the rest take their default, or, when
    `sample` is set, are drawn with their probabilities from a generator seeded by `seed`
    (which also draws every perfect tile)."""

    def __init__(self, given: dict[str, int] | None = None, sample: bool = False, seed: int = 0):
        self.given = dict(given or {})
        self.sample = sample
        self.rng = random.Random(seed)

    def categorical(self, label: str, candidates: Sequence[int], probs: Sequence[float],
                    default: int) -> int | None:
        """The index to take, or None to draw."""
        value = self.given.get(label) if label else None
        if value in candidates:
            return list(candidates).index(value)
        return None if self.sample else default


def sample_categorical(
    rng: random.Random,
    candidates: Sequence[int],
    probs: Sequence[float],
    decision: int | None,
    default: int = 0,
) -> int:
    """The index of the chosen candidate: `decision` when given (checked), else drawn with
    the given probabilities."""
    if len(candidates) != len(probs) or not candidates:
        raise ScheduleError(
            f"sample_categorical: {len(candidates)} candidates and {len(probs)} probabilities; "
            "give one probability per candidate, at least one candidate"
        )
    if any(not isinstance(c, int) for c in candidates):
        raise ScheduleError(f"sample_categorical: candidates {list(candidates)} are not all ints")
    if any(p < 0 for p in probs) or sum(probs) <= 0:
        raise ScheduleError(
            f"sample_categorical: probabilities {list(probs)} must be non-negative with a "
            "positive sum"
        )
    if not isinstance(default, int) or not 0 <= default < len(candidates):
        raise ScheduleError(
            f"sample_categorical: default {default!r} is not an index into "
            f"{len(candidates)} candidates"
        )
    if decision is not None:
        if not isinstance(decision, int) or not 0 <= decision < len(candidates):
            raise ScheduleError(
                f"sample_categorical: decision {decision!r} is not an index into "
                f"{len(candidates)} candidates"
            )
        return decision
    return rng.choices(range(len(candidates)), weights=probs)[0]
