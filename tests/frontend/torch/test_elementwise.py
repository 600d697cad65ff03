"""Elementwise ATen converters against torch eager: promotion as torch promotes (a Python
number never widens a tensor), integer division modes, comparisons and activations."""

import pytest

from tests.frontend.torch.common import check, ops_of, torch

F = torch.nn.functional


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)))


@pytest.mark.parametrize("fn", [
    lambda x, y: x + 2 * y, lambda x, y: x - y * 0.5, lambda x, y: 3.0 - x,
    lambda x, y: torch.add(x, y, alpha=2), lambda x, y: torch.sub(x, y, alpha=3),
    lambda x, y: torch.rsub(x, y, alpha=2),
    lambda x, y: x / y, lambda x, y: x ** 2 + y.abs() ** 0.5, lambda x, y: 2 ** x,
    lambda x, y: torch.maximum(x, y) - torch.minimum(x, y),
    lambda x, y: torch.where(x > y, x, y), lambda x, y: torch.where(x > 0, x, 0.5),
    lambda x, y: torch.remainder(x, 0.7), lambda x, y: torch.fmod(x, 0.7),
])
def test_float_arithmetic(fn):
    check(fn, randn(2, 3), randn(3) + 2.0)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_integer_division_modes(mode):
    x = torch.tensor([[-7, -6, 5, 7], [9, -9, 0, 3]])
    y = torch.tensor([2, -4, 3, -2])
    check(lambda a, b: torch.div(a, b, rounding_mode=mode), x, y)
    check(lambda a, b: torch.div(a.float(), b.float(), rounding_mode=mode), x, y)


def test_integer_tensor_with_a_float_number_becomes_float():
    check(lambda a: a * 0.5 + 1, torch.tensor([1, 2, 3]))


def test_int32_tensor_with_an_int_number_stays_int32():
    check(lambda a: a + 7, torch.tensor([1, 2, 3], dtype=torch.int32))  # dtypes compared


@pytest.mark.parametrize("fn", [
    lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x < 0.5, lambda x, y: x <= y,
    lambda x, y: x > y, lambda x, y: x >= 1,
    lambda x, y: (x > 0) & (y > 0), lambda x, y: (x > 0) | (y > 0), lambda x, y: (x > 0) ^ (y > 0),
    lambda x, y: ~(x > y), lambda x, y: torch.logical_not(x),
])
def test_comparisons_and_logic(fn):
    x = torch.tensor([[0.0, 1.0, 2.0], [-1.0, 0.5, 1.0]])
    check(fn, x, torch.tensor([0.0, 0.5, 3.0]))


@pytest.mark.parametrize("fn", [
    torch.exp, torch.log1p, torch.expm1, torch.log2, torch.log10, torch.rsqrt, torch.sqrt,
    torch.sigmoid, torch.tanh, torch.erf, torch.sin, torch.cos, torch.reciprocal, torch.floor,
    torch.ceil, torch.round, torch.trunc, torch.sign, torch.neg, torch.abs, torch.exp2,
    F.relu, F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.silu, F.mish, F.softplus,
    F.elu, F.selu, F.celu, F.leaky_relu, F.hardtanh, F.relu6, F.hardsigmoid, F.hardswish,
    lambda x: torch.clamp(x, min=-0.5), lambda x: torch.clamp(x, -0.5, 0.25),
    lambda x: x.clamp(max=0.1), torch.isnan, torch.isinf,
])
def test_unary(fn):
    check(fn, randn(3, 4).abs() + 0.1 if fn in (torch.log1p, torch.log2, torch.log10, torch.rsqrt,
                                                 torch.sqrt) else randn(3, 4) * 3)


def test_casts_and_copies_are_free():
    mod = check(lambda x: x.to(torch.float32).clone().contiguous() + 1, randn(2, 2))
    assert ops_of(mod) == ["add"]


def test_cast_to_integer_truncates():
    check(lambda x: x.to(torch.int32), torch.tensor([-1.7, -0.2, 0.5, 2.9]))
