"""The cost model: gradient-boosted trees (XGBoost) that predict how fast a candidate will be.

It learns from every measurement of the tune so far, pooled across tasks: the input is a
candidate's features (`tcc.tune.features`), the target its speedup over its task's default
schedule, as a logarithm (so tasks of any latency share one scale; a failed candidate
counts as 10x slower than the default). The search only ranks candidates of one task by
it, so a model that orders well is enough. Retrained from scratch after each round of
measurements: a few hundred rows a second at most, so it stays cheap.
"""

from __future__ import annotations

import math

import numpy as np

FAILED = math.log(0.1)
MIN_ROWS = 16  # fewer measurements than this: the model is not trained, the search draws


class CostModel:
    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rows: list[np.ndarray] = []
        self.targets: list[float] = []
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def add(self, features: np.ndarray, ratio: float | None) -> None:
        """One measurement: the candidate's latency over its default's (None: it failed)."""
        self.rows.append(features)
        self.targets.append(FAILED if not ratio else -math.log(ratio))

    def fit(self) -> None:
        if len(self.rows) < MIN_ROWS:
            return
        import xgboost

        data = xgboost.DMatrix(np.stack(self.rows),
                               label=np.asarray(self.targets, dtype=np.float32))
        params = {"max_depth": 6, "eta": 0.2, "subsample": 0.9, "min_child_weight": 1,
                  "nthread": 1, "seed": self.seed, "verbosity": 0,
                  "objective": "reg:squarederror"}
        self._booster = xgboost.train(params, data, num_boost_round=100)

    def predict(self, features: list[np.ndarray]) -> np.ndarray:
        """Predicted log speedups (zeros before the model is trained)."""
        if self._booster is None or not features:
            return np.zeros(len(features))
        import xgboost

        return self._booster.predict(xgboost.DMatrix(np.stack(features)))
