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


class Attention(nn.Module):
    """GPT-2's attention as transformers writes it: a masked scaled dot-product attention
    whose heads are merged back by reshapes, then flattened by a view for the projection."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, -1, 8).transpose(1, 2) for t in self.qkv(x).split(16, dim=2))
        mask = torch.ones(s, s, dtype=torch.bool).tril().expand(b, 1, s, s)
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.reshape(b, -1, s, 8).transpose(1, 2).reshape(b, s, -1)
        return self.proj(out.view(-1, 16)).view(b, s, 16)


def test_a_view_that_fake_tensors_refuse_compiles(caplog):
    """AOT autograd's fake attention output has strides the exported view refuses, though
    the real tensor takes it: tcc traces views as reshapes (same values)."""
    torch.manual_seed(0)
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=64)
    program = torch.export.export(Attention().eval(), (torch.randn(2, 5, 16),),
                                  dynamic_shapes=({0: batch, 1: seq},))
    assert torch.ops.aten.view.default in {n.target for n in program.graph.nodes}
    module = program.module()
    compiled = torch.compile(module, backend="tcc")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        for shape in ((2, 5, 16), (3, 7, 16)):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-5)
    assert [r.getMessage() for r in caplog.records if r.name == "tcc.dynamo"] == []


class Frames(nn.Module):
    """A size computed from a dynamic one (wav2vec2's frame count): `n // 20 - 1` is a
    length only where n >= 20, which Dynamo's guards keep as the range of n."""

    def forward(self, x):
        n = x.shape[1] // 20 - 1
        return x[:, :n] + torch.full((x.shape[0], n), 2.0)


def test_the_ranges_dynamos_guards_keep_are_facts(caplog):
    model = Frames()
    compiled = torch.compile(model, backend="tcc")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        for shape in ((2, 4000), (3, 6000), (1, 45)):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), model(x))
    assert [r.getMessage() for r in caplog.records if r.name == "tcc.dynamo"] == []
