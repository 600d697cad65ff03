"""Elementwise and broadcasting ops: math, comparisons, logic, activations."""

from __future__ import annotations

import numpy as np

from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import OpDef, Pattern, broadcast_shapes, register, same_dtype, tensor


def _unary_infer(name):
    def infer(args, attrs):
        return tensor(args[0], name)

    return infer


def _binary_infer(name, out_dtype=None):
    def infer(args, attrs):
        a, b = tensor(args[0], name), tensor(args[1], name)
        dtype = same_dtype([a, b], name)
        return TensorType(broadcast_shapes([a.shape, b.shape], name), out_dtype or dtype)

    return infer


def unary(name: str, fn, attrs=None, doc: str = "") -> OpDef:
    """Register a one-input op that keeps shape and dtype."""
    return register(
        OpDef(name, _unary_infer(name), fn, attrs or {}, Pattern.ELEMWISE, (1, 1), doc=doc)
    )


def binary(name: str, fn, out_dtype: str | None = None, doc: str = "") -> OpDef:
    """Register a two-input numpy-broadcasting op."""
    return register(
        OpDef(name, _binary_infer(name, out_dtype), fn, {}, Pattern.BROADCAST, (2, 2), doc=doc)
    )


unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)))
unary("exp", np.exp)
binary("add", np.add)
binary("sub", np.subtract)
binary("mul", np.multiply)
binary("less", np.less, out_dtype="bool")
