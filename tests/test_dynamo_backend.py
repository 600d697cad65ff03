"""torch.compile(model, backend="tcc"): registered by entry point, matches eager on static
and dynamic sizes (one recompile, then one pack for every size), keeps the module's weights as
constants, and falls back to eager with a logged reason for a graph tcc cannot take."""

import logging

import pytest

torch = pytest.importorskip("torch")

nn = torch.nn


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return self.head(y.mean((2, 3))).softmax(-1), y.amax(1)


def test_backend_is_registered_by_name():
    assert "tcc" in torch._dynamo.list_backends()


def test_static_and_dynamic_sizes_match_eager(caplog):
    torch.manual_seed(0)
    model = Block().eval()
    model.norm.running_var.uniform_(0.5, 2.0)
    compiled = torch.compile(model, backend="tcc")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        for batch, size in ((2, 8), (3, 8), (5, 8), (1, 6)):
            x = torch.randn(batch, 3, size, size)
            for got, want in zip(compiled(x), model(x)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert caplog.records == []  # every graph compiled by tcc, none left to eager


def test_transformer_layer_with_a_dynamic_sequence():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()
    compiled = torch.compile(layer, backend="tcc", dynamic=True)
    with torch.no_grad():
        for batch, seq in ((2, 5), (1, 17)):
            x = torch.randn(batch, seq, 32)
            torch.testing.assert_close(compiled(x), layer(x), rtol=1e-4, atol=1e-5)


class Spectrum(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs() * 2


def test_an_unsupported_op_falls_back_to_eager_with_a_reason(caplog):
    compiled = torch.compile(Spectrum(), backend="tcc")
    x = torch.randn(8)
    with caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        torch.testing.assert_close(compiled(x), Spectrum()(x))
    reasons = [r.getMessage() for r in caplog.records if r.name == "tcc.dynamo"]
    assert len(reasons) == 1
    assert reasons[0].startswith("tcc runs this graph eagerly: unsupported ATen op: aten._fft_r2c")


def test_a_graph_that_needs_gradients_runs_eagerly(caplog):
    model = nn.Linear(4, 2)
    compiled = torch.compile(model, backend="tcc")
    x = torch.randn(3, 4)
    with caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        out = compiled(x)
    out.sum().backward()  # eager kept autograd working
    assert model.weight.grad is not None
    assert any("needs gradients" in r.getMessage() for r in caplog.records)
