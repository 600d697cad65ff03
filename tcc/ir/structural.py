"""Structural equality and hashing that ignore the names of bound variables.

Both reduce a node to a canonical nested tuple in which every variable (graph Var, size
or loop Var, Buffer) is replaced by the order in which it is first met, scope by scope,
so `def f(x): y = relu(x)` and `def f(a): b = relu(a)` are equal. Everything else —
op names, attributes, types, dtypes, constant names, public input/output names, loop
kinds — takes part in the comparison.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math

import numpy as np

from tcc.ir import expr as E
from tcc.ir import graph as G
from tcc.ir import tir as T
from tcc.ir.fields import field_names
from tcc.ir.module import IRModule


def attr_key(v):
    """A hashable stand-in for an attribute value (or a whole attribute dict); equal attrs
    give equal keys. Size variables compare by identity, as they do in the IR."""
    if isinstance(v, E.Var):
        return ("sizevar", id(v))
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else repr(v))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, *(attr_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", *((k, attr_key(x)) for k, x in sorted(v.items())))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return attr_key(v.item())
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return (type(v).__name__, *(attr_key(getattr(v, fname)) for fname in field_names(v)))
    return (type(v).__name__, v)


class _Canon:
    def __init__(self):
        self.ids: dict[int, int] = {}
        self.keep: list = []  # keeps numbered objects alive so ids stay unique

    def var(self, kind: str, obj) -> tuple:
        key = id(obj)
        if key not in self.ids:
            self.ids[key] = len(self.ids)
            self.keep.append(obj)
        return (kind, self.ids[key])

    def __call__(self, x):
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return ("float", repr(x)) if not math.isnan(x) else ("float", "nan")
        if isinstance(x, enum.Enum):
            return (type(x).__name__, x.value)
        if isinstance(x, list):
            return ("list", *(self(y) for y in x))
        if isinstance(x, tuple):
            return ("tuple", *(self(y) for y in x))
        if isinstance(x, dict):
            return ("dict", *((k, self(v)) for k, v in sorted(x.items())))
        if isinstance(x, E.Var):
            return (*self.var("var", x), x.dtype)
        if isinstance(x, T.Buffer):
            first = id(x) not in self.ids
            ref = self.var("buffer", x)
            if first:  # a buffer's shape/dtype/scope are part of its definition
                return (*ref, self(x.shape), x.dtype, x.scope)
            return ref
        if isinstance(x, G.Var):
            first = id(x) not in self.ids
            ref = self.var("gvar", x)
            return (*ref, self(x.type)) if first else ref
        if isinstance(x, IRModule):
            return (
                "module",
                tuple((name, self.scoped(f)) for name, f in sorted(x.functions.items())),
                tuple((name, self(t)) for name, t in sorted(x.const_types.items())),
            )
        if dataclasses.is_dataclass(x):
            return (type(x).__name__, *(self(getattr(x, fname)) for fname in field_names(x)))
        if hasattr(x, "item"):  # numpy scalar
            return self(x.item())
        raise TypeError(f"no structural form for {type(x).__name__}")

    def scoped(self, f):
        """Canonicalize a function with its own variable numbering."""
        saved_ids, saved_keep = self.ids, self.keep
        self.ids, self.keep = {}, []
        try:
            return self(f)
        finally:
            self.ids, self.keep = saved_ids, saved_keep


def canonical_form(x) -> tuple:
    """The canonical nested-tuple form of an IR node, function or module."""
    c = _Canon()
    return c.scoped(x) if isinstance(x, (G.Function, T.PrimFunc)) else c(x)


def structural_equal(a, b) -> bool:
    """True when `a` and `b` are the same IR up to the names of bound variables."""
    return canonical_form(a) == canonical_form(b)


def structural_hash(x) -> str:
    """A stable hex digest of the canonical form (equal IR -> equal hash, across runs)."""
    return hashlib.sha256(repr(canonical_form(x)).encode()).hexdigest()
