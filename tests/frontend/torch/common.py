"""Shared by the PyTorch frontend tests: export a module, import it, and compare tcc's
reference interpreter with torch eager on the given inputs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tcc.frontend.torch import from_exported_program  # noqa: E402
from tcc.ir.interp import run  # noqa: E402


class Fn(torch.nn.Module):
    """A function as a module, for torch.export."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def export(model, *inputs, dynamic=None):
    """torch.export of `model` (a module or a function) at `inputs`; `dynamic` gives each
    input's dynamic axes, {axis: Dim}, or None for a static input."""
    model = model if isinstance(model, torch.nn.Module) else Fn(model)
    model.eval()
    shapes = None
    if dynamic is not None:
        shapes = {"args": tuple(dynamic)} if isinstance(model, Fn) else tuple(dynamic)
    return torch.export.export(model, tuple(inputs), dynamic_shapes=shapes)


def as_list(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for v in out.values()]
    return [o for o in out]


def check(model, *inputs, dynamic=None, more=(), rtol=1e-5, atol=1e-5):
    """Import `model` exported at `inputs`, then compare with eager on `inputs` and on each
    input tuple of `more` (other sizes of the dynamic axes). Returns the IRModule."""
    ep = export(model, *inputs, dynamic=dynamic)
    mod = from_exported_program(ep)
    eager = model if isinstance(model, torch.nn.Module) else Fn(model)
    for args in (tuple(inputs), *more):
        with torch.no_grad():
            want = as_list(eager(*args))
        got = run(mod, [a.numpy() for a in args])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = w.numpy()
            assert g.shape == w.shape, (g.shape, w.shape)
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return mod


def ops_of(mod) -> list[str]:
    from tcc.ir.graph import Call

    return [b.value.op for b in mod["main"].bindings if isinstance(b.value, Call)]
