"""Data-movement ATen converters against torch eager: views over symbolic sizes, slices
(negative and open bounds), concatenation, splits, gathers and advanced indexing, padding,
and tensors made from sizes."""

import pytest

from tests.frontend.torch.common import check, ops_of, torch

Dim = torch.export.Dim


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("fn", [
    lambda x: x.view(x.shape[0], -1), lambda x: x.permute(2, 0, 1), lambda x: x.transpose(0, 2),
    lambda x: x.t() if x.ndim == 2 else x.unsqueeze(1).squeeze(1), lambda x: x[None, :, None],
    lambda x: x[1:, ::2, -2:], lambda x: x[:, -1], lambda x: x[-1], lambda x: x[..., 1:3],
    lambda x: x.flip(0, 2), lambda x: x.repeat(2, 1, 1, 2), lambda x: x.expand(2, 3, 4, 5),
    lambda x: torch.cat([x, x * 2], dim=-1), lambda x: torch.stack([x, x + 1], dim=1),
    lambda x: torch.split(x, [1, 3], dim=1)[1], lambda x: x.chunk(2, dim=2)[0],
    lambda x: x.unbind(0)[1], lambda x: torch.nn.functional.pad(x, (1, 2, 0, 1), value=0.5),
    lambda x: torch.nn.functional.pad(x, (-1, 1)),
])
def test_views_and_movement(fn):
    check(fn, randn(3, 4, 5))


def test_reshape_over_symbolic_sizes():
    b, s = Dim("b", min=2, max=32), Dim("s", min=2, max=64)
    x = randn(2, 6, 8)
    mod = check(lambda t: t.reshape(t.shape[0], t.shape[1], 2, 4).transpose(1, 2)
                .reshape(t.shape[0] * 2, -1), x,
                dynamic=[{0: b, 1: s}], more=[(randn(3, 5, 8),), (randn(5, 2, 8),)])
    assert "reshape" in ops_of(mod)


def test_slice_end_past_every_accepted_size():
    """The slice's end (64) is beyond the longest sequence the program accepts (32): torch
    counts the length as the sequence, and so does tcc."""
    table = randn(64, 4)
    s = Dim("s", min=2, max=32)
    check(lambda x: x + table[: x.shape[0]], randn(5, 4), dynamic=[{0: s}],
          more=[(randn(9, 4),)])


@pytest.mark.parametrize("fn", [
    lambda x, i: x[i], lambda x, i: x[:, i], lambda x, i: x.index_select(1, i.flatten()),
    lambda x, i: torch.nn.functional.embedding(i, x), lambda x, i: x[i, i],
    lambda x, i: torch.gather(x, 1, i.flatten().clamp(max=3).expand(5, -1)[:, :3] % 4),
])
def test_gathers(fn):
    check(fn, randn(5, 4), torch.tensor([[0, 3], [2, 1]]))


@pytest.mark.parametrize("index", [torch.tensor([0]), torch.tensor(0)])
def test_gather_of_a_0d_tensor_has_the_index_shape(index):
    # torch.gather(x, 0, i) of a 0-d x is the index's shape: (1,) here, or 0-d
    check(lambda x, i: torch.gather(x, 0, i) * 2, torch.tensor(3.5), index)


def test_boolean_mask_index_is_refused_by_name():
    from tcc.frontend.torch import from_exported_program
    from tcc.ir.errors import FrontendError
    from tests.frontend.torch.common import export

    ep = export(lambda x, i: x[:, i], randn(3, 4), torch.tensor([True, False, True, True]))
    with pytest.raises(FrontendError, match="boolean mask"):
        from_exported_program(ep)


def test_tensors_made_from_sizes():
    s = Dim("s", min=2, max=64)
    check(lambda x: x + torch.arange(x.shape[0]).unsqueeze(1) + torch.ones(x.shape[0], 1)
          + torch.full((1, 3), 2.5) + torch.zeros_like(x), randn(4, 3), dynamic=[{0: s}],
          more=[(randn(7, 3),)])
    check(lambda x: torch.arange(1, x.shape[0] * 2, 3, dtype=torch.float32), randn(6, 2),
          dynamic=[{0: Dim("n", min=3, max=64)}], more=[(randn(11, 2),)])


def test_nonzero_counts_when_the_program_runs():
    """torch.nonzero's count is a size torch knows only at run time (`u0`); the program
    exported at one input matches eager at others with other counts."""
    x = torch.tensor([[0.5, -1.0, 2.0], [0.0, 3.0, -0.5]])
    more = [(torch.randn(2, 3),), (-torch.ones(2, 3),), (torch.ones(2, 3),)]
    check(lambda x: torch.nonzero(x > 0), x, more=more)
