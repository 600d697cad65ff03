"""Linear algebra and neural-network ATen converters against torch eager: matrix
products, convolutions of every rank (grouped, dilated, transposed), normalizations,
pooling, upsampling and scaled dot-product attention (kept whole by the decomposition, then
two matmuls around a softmax)."""

import pytest

from tests.frontend.torch.common import check, ops_of, torch

nn, F = torch.nn, torch.nn.functional
Dim = torch.export.Dim


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_linear_and_matmuls():
    lin = nn.Linear(8, 5)
    w, w2 = randn(8, 3, seed=2), randn(5, 2, seed=1)
    check(lambda x: lin(x) @ w2 + (x @ w).sum(-1, keepdim=True), randn(2, 4, 8))
    check(lambda a, b: torch.addmm(b[0, :1], a, b, beta=0.5, alpha=2.0), randn(3, 4), randn(4, 2))
    check(lambda a, b: torch.bmm(a, b), randn(2, 3, 4), randn(2, 4, 5))


@pytest.mark.parametrize("layer", [
    nn.Conv1d(4, 6, 5, stride=2, padding=2), nn.Conv1d(4, 8, 3, groups=4, dilation=2),
    nn.Conv2d(4, 6, 3, padding=1), nn.Conv2d(4, 4, 3, stride=2, groups=4, bias=False),
    nn.Conv2d(4, 6, (3, 1), padding=(1, 0), dilation=(2, 1)),
    nn.Conv3d(4, 2, 3, padding=1), nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1),
    nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1),
])
def test_convolutions(layer):
    nd = sum(isinstance(layer, c) for c in (nn.Conv1d, nn.ConvTranspose1d)) and 1 or (
        3 if isinstance(layer, nn.Conv3d) else 2)
    x = randn(2, 4, *([9] * nd))
    check(layer, x, rtol=1e-4, atol=1e-5)


def test_convolution_over_a_dynamic_length():
    conv = nn.Conv1d(3, 4, 10, stride=5)
    t = Dim("t", min=20, max=4000)
    check(conv, randn(1, 3, 100), dynamic=[{2: t}], more=[(randn(1, 3, 77),)], rtol=1e-4)


@pytest.mark.parametrize("layer", [
    nn.BatchNorm2d(4), nn.BatchNorm1d(4), nn.LayerNorm(5), nn.LayerNorm([4, 5], elementwise_affine=False),
    nn.GroupNorm(2, 4), nn.InstanceNorm1d(4, affine=True),
])
def test_normalizations(layer):
    if isinstance(layer, nn.BatchNorm2d | nn.BatchNorm1d):
        layer.running_mean.uniform_(-1, 1)
        layer.running_var.uniform_(0.5, 2)
    x = randn(2, 4, 5, 5) if isinstance(layer, nn.BatchNorm2d) else randn(2, 4, 5)
    check(layer, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer", [
    nn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(2, ceil_mode=True), nn.MaxPool1d(3),
    nn.AvgPool2d(3, stride=2, padding=1), nn.AvgPool2d(3, padding=1, count_include_pad=False),
    nn.AvgPool1d(2), nn.AdaptiveAvgPool2d(1), nn.AdaptiveAvgPool2d((2, 3)),
    nn.Upsample(scale_factor=2, mode="nearest"), nn.Upsample(size=(9, 13), mode="nearest"),
    nn.Upsample(scale_factor=2, mode="bilinear"),
    nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
])
def test_pooling_and_upsampling(layer):
    x = randn(2, 3, 7) if "1d" in type(layer).__name__ else randn(2, 3, 6, 6)
    check(layer, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax(dim):
    check(lambda x: F.softmax(x, dim) + F.log_softmax(x, dim), randn(2, 3, 4))


@pytest.mark.parametrize("kind", ["plain", "causal", "bool mask", "float mask", "gqa", "3-d", "scale"])
def test_scaled_dot_product_attention(kind):
    q, k, v = randn(2, 4, 5, 8, seed=1), randn(2, 4, 7, 8, seed=2), randn(2, 4, 7, 8, seed=3)
    mask = randn(5, 7, seed=4) > -0.5
    fns = {
        "plain": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], is_causal=True),
        "bool mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "float mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float() * -2.0),
        "gqa": lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True),
        "3-d": lambda q, k, v: F.scaled_dot_product_attention(q[0], k[0], v[0]),
        "scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
    }
    mod = check(fns[kind], q, k, v, rtol=1e-5, atol=1e-5)
    assert ops_of(mod).count("matmul") == 2 and "softmax" in ops_of(mod)


def test_attention_over_dynamic_batch_and_sequence():
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    b, s = Dim("batch", min=1, max=8), Dim("seq", min=2, max=64)
    check(layer, randn(2, 6, 16), dynamic=[{0: b, 1: s}], more=[(randn(3, 11, 16, seed=5),)],
          rtol=1e-4, atol=1e-5)


def test_cumsum_and_triangles():
    check(lambda x: torch.cumsum(x, 1) + torch.tril(x) - torch.triu(x, 1), randn(4, 4))
