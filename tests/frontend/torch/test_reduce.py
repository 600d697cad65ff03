"""Reduction ATen converters against torch eager: every dim when none is given, kept
dims, values with indices, integer sums (which torch widens to int64), any/all, norms and
variance."""

import pytest

from tests.frontend.torch.common import check, torch


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.sum((0, 2), keepdim=True),
    lambda x: x.mean(-1), lambda x: x.mean(), lambda x: x.amax(1), lambda x: x.amin((0, 1)),
    lambda x: x.max(), lambda x: x.min(), lambda x: x.max(1).values, lambda x: x.max(1).indices,
    lambda x: x.min(2, keepdim=True)[1], lambda x: x.argmax(), lambda x: x.argmin(1, keepdim=True),
    lambda x: x.prod(1), lambda x: x.var(1), lambda x: x.var(1, correction=0, keepdim=True),
    lambda x: x.std(), lambda x: (x > 0).any(1), lambda x: (x > -2).all(), lambda x: (x > 0).sum(1),
    lambda x: torch.linalg.vector_norm(x, dim=1), lambda x: torch.linalg.vector_norm(x, ord=1),
    lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=(0, 2)),
    lambda x: torch.linalg.vector_norm(x, ord=3, dim=2, keepdim=True),
    lambda x: torch.nn.functional.normalize(x, dim=1),
])
def test_reductions(fn):
    check(fn, randn(2, 3, 4), rtol=1e-5, atol=1e-5)


def test_integer_sum_widens():
    check(lambda x: x.sum(0), torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
