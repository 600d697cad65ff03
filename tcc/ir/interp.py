"""The reference interpreter: runs a graph function on numpy arrays through the op registry's
numpy references. It defines what every later stage must compute."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tcc.ir.dtype import round_to_bfloat16, to_numpy
from tcc.ir.errors import InputError, InternalError, TccError
from tcc.ir.expr import PrimExpr, Var, evaluate
from tcc.ir.graph import (
    Call,
    CallTIR,
    Constant,
    Expr,
    Function,
    ShapeExpr,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
)
from tcc.ir.graph import Var as GVar
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import get_op


def bind_inputs(func: Function, inputs: Sequence[Any] | Mapping[str, Any]) -> tuple[list, dict]:
    """Check inputs against the signature and bind its size variables.

    `inputs` is a list in parameter order or a mapping by input name. Returns the arrays in
    parameter order and the size-variable environment. Raises InputError naming the input.
    """
    names = list(func.input_names)
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise InputError(
                f"unknown input {unknown[0]!r}; the function's inputs are {', '.join(map(repr, names))}"
            )
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InputError(f"missing input {missing[0]!r}; pass it with --input {missing[0]}=FILE.npy")
        arrays = [inputs[n] for n in names]
    else:
        arrays = list(inputs)
        if len(arrays) != len(names):
            raise InputError(f"expected {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
    env: dict = {}
    out = []
    for name, param, value in zip(names, func.params, arrays):
        arr = np.asarray(value)
        ptype = param.type
        if not isinstance(ptype, TensorType):
            raise InputError(f"input {name!r}: only tensor inputs are supported")
        want = to_numpy(ptype.dtype)
        if ptype.dtype == "bfloat16" and arr.dtype.name == "bfloat16":  # ml_dtypes arrays
            arr = arr.astype(np.float32)
        if arr.dtype != want:
            raise InputError(f"input {name!r}: expected dtype {ptype.dtype}, got {arr.dtype}; convert it with astype")
        if arr.ndim != ptype.ndim:
            raise InputError(
                f"input {name!r}: expected rank {ptype.ndim} (shape {_fmt_shape(ptype.shape)}), "
                f"got rank {arr.ndim} (shape {tuple(arr.shape)})"
            )
        _match_shape(ptype.shape, arr.shape, env, lambda i, exp, got, n=name, t=ptype: InputError(
            f"input {n!r}: dimension {i} is {got} but the signature {_fmt_shape(t.shape)} requires {exp}"
        ))
        out.append(arr)
    return out, env


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _match_shape(expected, actual, env: dict, make_error) -> None:
    """Bind unbound size variables from `actual`, then check every dimension."""
    pending = []
    for i, (d, got) in enumerate(zip(expected, actual)):
        if isinstance(d, Var) and d not in env:
            env[d] = int(got)
        else:
            pending.append((i, d, got))
    for i, d, got in pending:
        try:
            exp = evaluate(d, env)
        except KeyError:
            continue  # a dimension over variables bound nowhere yet: nothing to check
        if exp != got:
            raise make_error(i, exp, got)


class Interpreter:
    """Evaluates the bindings of a graph function in order."""

    def __init__(self, mod: IRModule):
        self.mod = mod

    def run(self, name: str, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        func = self.mod.functions.get(name)
        if not isinstance(func, Function):
            raise TccError(f"no graph function named {name!r} in the module")
        arrays, env = bind_inputs(func, inputs)
        values: dict = dict(zip(func.params, arrays))
        for b in func.bindings:
            result = _round_bfloat16(b.var.type, self._eval(b.value, values, env))
            self._check(b.var.name, b.var.type, result, env)
            values[b.var] = result
        outs = [self._value(o, values) for o in func.outputs]
        return [np.asarray(o) for o in outs]

    def _value(self, e: Expr | None, values: dict):
        if e is None:
            return None
        if isinstance(e, GVar):
            return values[e]
        if isinstance(e, Constant):
            try:
                return self.mod.const_values[e.name]
            except KeyError:
                raise TccError(f"constant {e.name!r} has no value; load the module from its .tcir file") from None
        if isinstance(e, Tuple):
            return tuple(self._value(f, values) for f in e.fields)
        if isinstance(e, TupleGetItem):
            return self._value(e.value, values)[e.index]
        raise InternalError(f"unexpected operand {type(e).__name__}")

    def _eval(self, e: Expr, values: dict, env: dict):
        if isinstance(e, Call):
            op = get_op(e.op)
            args = [self._value(a, values) for a in e.args]
            attrs = {k: _eval_attr(v, env) for k, v in e.attrs.items()}
            return op.ref(*args, **attrs)
        if isinstance(e, ShapeExpr):
            return tuple(int(evaluate(d, env)) for d in e.dims)
        if isinstance(e, CallTIR):
            raise TccError("the reference interpreter runs graph ops only; call_tir needs a compiled module")
        return self._value(e, values)

    def _check(self, name: str, t: Type, value, env: dict):
        if isinstance(t, TupleType):
            if not isinstance(value, (tuple, list)) or len(value) != len(t.fields):
                raise InternalError(f"{name}: expected a {len(t.fields)}-tuple")
            for i, (ft, fv) in enumerate(zip(t.fields, value)):
                self._check(f"{name}[{i}]", ft, fv, env)
            return
        if isinstance(t, TensorType):
            arr = np.asarray(value)
            if arr.ndim != t.ndim or arr.dtype != to_numpy(t.dtype):
                raise InternalError(
                    f"{name}: op produced {arr.dtype}{list(arr.shape)}, its type says "
                    f"{t.dtype}{_fmt_shape(t.shape)} (op inference and reference disagree)"
                )
            _match_shape(t.shape, arr.shape, env, lambda i, exp, got: InternalError(
                f"{name}: dimension {i} is {got}, inferred {exp} (op inference and reference disagree)"
            ))


def _round_bfloat16(t: Type, value):
    """bfloat16 results are held as float32 rounded to bfloat16 precision."""
    if isinstance(t, TensorType) and t.dtype == "bfloat16" and value is not None:
        return round_to_bfloat16(value)
    if isinstance(t, TupleType) and isinstance(value, (tuple, list)):
        return tuple(_round_bfloat16(ft, v) for ft, v in zip(t.fields, value))
    return value


def _eval_attr(v, env):
    if isinstance(v, PrimExpr):
        return evaluate(v, env)
    if isinstance(v, list):
        return [_eval_attr(x, env) for x in v]
    if isinstance(v, tuple):
        return tuple(_eval_attr(x, env) for x in v)
    return v


def run(mod: IRModule, inputs: Sequence[Any] | Mapping[str, Any], name: str = "main") -> list[np.ndarray]:
    """Run graph function `name` of `mod` on numpy inputs; returns the outputs in order."""
    return Interpreter(mod).run(name, inputs)
