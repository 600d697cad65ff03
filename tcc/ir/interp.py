"""The reference interpreter: runs a graph function on numpy arrays through the op registry's
numpy references. It defines what every later stage must compute.

Control flow (If, Loop, Scan) runs its callees through the same entry point as the top-level
function, so each call checks its arguments against the callee's signature and binds the
callee's size variables afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tcc.ir.dtype import round_to_bfloat16, to_numpy
from tcc.ir.errors import InputError, InternalError, TccError
from tcc.ir.expr import PrimExpr, Var, evaluate, free_vars
from tcc.ir.graph import (
    Call,
    CallTIR,
    Constant,
    Expr,
    Function,
    If,
    Loop,
    OptionalType,
    Scan,
    SequenceType,
    ShapeExpr,
    ShapeType,
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
    out = [_bind_input(f"input {name!r}", param.type, value, env)
           for name, param, value in zip(names, func.params, arrays)]
    return out, env


def _bind_input(what: str, ptype: Type, value, env: dict):
    """One input checked against its type (`what` names it in errors), size variables bound."""
    if isinstance(ptype, OptionalType):
        return None if value is None else _bind_input(what, ptype.elem, value, env)
    if value is None:
        raise InputError(f"{what}: no value given; only an optional input may be left empty")
    if isinstance(ptype, SequenceType):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{what}: expected a sequence, got {type(value).__name__}; give a "
                             f"list of {ptype.dtype} arrays (from the command line, an .npz of "
                             "them in order: --input NAME=FILE.npz)")
        rank = None if ptype.shape is None else len(ptype.shape)
        element = TensorType(tuple(d if d is not None else Var("any") for d in ptype.shape or ()),
                             ptype.dtype)
        items = []
        for i, item in enumerate(value):
            arr = np.asarray(item)
            if rank is None:
                element = TensorType(tuple(Var("any") for _ in range(arr.ndim)), ptype.dtype)
            items.append(_bind_input(f"{what} element {i}", element, arr, {}))
        return items
    if not isinstance(ptype, TensorType):
        raise InputError(f"{what}: only tensor, sequence and optional inputs are supported")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        raise InputError(f"{what}: expected a tensor, got a sequence of {len(value)} arrays; "
                         "give one array (from the command line, an .npy file)")
    arr = np.asarray(value)
    want = to_numpy(ptype.dtype)
    if ptype.dtype == "bfloat16" and arr.dtype.name == "bfloat16":  # ml_dtypes arrays
        arr = arr.astype(np.float32)
    if arr.dtype != want:
        raise InputError(f"{what}: expected dtype {ptype.dtype}, got {arr.dtype}; convert it with astype")
    if arr.ndim != ptype.ndim:
        raise InputError(
            f"{what}: expected rank {ptype.ndim} (shape {_fmt_shape(ptype.shape)}), "
            f"got rank {arr.ndim} (shape {tuple(arr.shape)})"
        )
    _match_shape(ptype.shape, arr.shape, env, lambda i, exp, got: InputError(
        f"{what}: dimension {i} is {got} but the signature {_fmt_shape(ptype.shape)} requires {exp}"
    ))
    return arr


def check_failure(message: str, cond: PrimExpr, env: dict) -> str:
    """The error of a failed shape check: its message, then the sizes the condition reads in
    order of first use (the VM builtin assert_shape words it the same way)."""
    values = ", ".join(f"{v.name} = {env[v]}" for v in free_vars(cond) if v in env)
    return f"{message} ({values})" if values else message


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
            result = _round_bfloat16(b.var.type, self._eval(b.value, values, env, b.var.type))
            self._check(b.var.name, b.var.type, result, env)
            values[b.var] = result
        return [_output(self._value(o, values)) for o in func.outputs]

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

    def _eval(self, e: Expr, values: dict, env: dict, rtype: Type):
        if isinstance(e, If):
            branch = e.then_branch if _flag(self._value(e.cond, values)) else e.else_branch
            return _unpack(self.run(branch, [self._value(a, values) for a in e.args]))
        if isinstance(e, Loop):
            return self._loop(e, values, _result_types(rtype), env)
        if isinstance(e, Scan):
            return self._scan(e, values, _result_types(rtype), env)
        if isinstance(e, Call):
            op = get_op(e.op)
            args = [self._value(a, values) for a in e.args]
            attrs = {k: _eval_attr(v, env) for k, v in e.attrs.items()}
            return op.ref(*args, **attrs)
        if isinstance(e, ShapeExpr):
            for cond, message in e.checks:
                if not evaluate(cond, env):
                    raise InputError(check_failure(message, cond, env))
            return tuple(int(evaluate(d, env)) for d in e.dims)
        if isinstance(e, CallTIR):
            raise TccError("the reference interpreter runs graph ops only; call_tir needs a compiled module")
        return self._value(e, values)

    def _loop(self, e: Loop, values: dict, types: list[Type], env: dict):
        """ONNX Loop semantics; without a `cond` operand the body's condition is ignored."""
        trips = self._value(e.max_trip_count, values)
        limit = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
        cond = True if e.cond is None else _flag(self._value(e.cond, values))
        carried = [self._value(a, values) for a in e.carried]
        captured = [self._value(a, values) for a in e.captured]
        scans: list[list] = [[] for _ in types[len(carried) :]]
        i = 0
        while cond and (limit is None or i < limit):
            flags = [np.array(i, np.int64), np.array(cond)]
            outs = self.run(e.body, flags + carried + captured)
            if e.cond is not None:
                cond = _flag(outs[0])
            carried = outs[1 : 1 + len(carried)]
            for acc, out in zip(scans, outs[1 + len(carried) :]):
                acc.append(out)
            i += 1
        stacked = [_stack(acc, 0, t, env) for acc, t in zip(scans, types[len(carried) :])]
        return _unpack(carried + stacked)

    def _scan(self, e: Scan, values: dict, types: list[Type], env: dict):
        n = len(e.args) - e.num_scan_inputs
        states = [self._value(a, values) for a in e.args[:n]]
        sequences = [np.asarray(self._value(a, values)) for a in e.args[n:]]
        axes = [axis % max(s.ndim, 1) for s, axis in zip(sequences, e.scan_input_axes)]
        captured = [self._value(a, values) for a in e.captured]
        length = sequences[0].shape[axes[0]]
        scans: list[list] = [[] for _ in e.scan_output_axes]
        for t in range(length):
            slices = [np.take(s, length - 1 - t if rev else t, axis=axis)
                      for s, axis, rev in zip(sequences, axes, e.scan_input_directions)]
            outs = self.run(e.body, states + slices + captured)
            states = outs[:n]
            for acc, out in zip(scans, outs[n:]):
                acc.append(out)
        stacked = []
        for acc, t, axis, rev in zip(scans, types[n:], e.scan_output_axes,
                                     e.scan_output_directions):
            stacked.append(_stack(acc[::-1] if rev else acc, axis, t, env))
        return _unpack(states + stacked)

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
        if isinstance(t, OptionalType):
            if value is not None:
                self._check(name, t.elem, value, env)
            return
        if isinstance(t, SequenceType):
            if not isinstance(value, list):
                raise InternalError(f"{name}: expected a sequence, got {type(value).__name__}")
            for i, item in enumerate(value):
                if item.dtype != to_numpy(t.dtype) or (t.shape is not None and (
                        item.ndim != len(t.shape)
                        or any(d is not None and d != n for d, n in zip(t.shape, item.shape)))):
                    raise InternalError(
                        f"{name}[{i}]: op produced {item.dtype}{list(item.shape)}, its type says "
                        f"{t} (op inference and reference disagree)")
            return
        if isinstance(t, ShapeType) and t.dims is not None:
            if len(value) != t.ndim:
                raise InputError(f"{name}: expected {t.ndim} sizes, got {len(value)}")
            _match_shape(t.dims, value, env, lambda i, exp, got: InputError(
                f"{name}: size {i} is {got}, but {exp} is required"))


def _output(value):
    """A function result as returned: an array, a list of arrays (a sequence) or None (an
    empty optional)."""
    if value is None or isinstance(value, list):
        return value
    return np.asarray(value)


def _flag(value) -> bool:
    """The truth of a one-element tensor (an If or Loop condition)."""
    return bool(np.asarray(value).reshape(-1)[0])


def _result_types(t: Type) -> list[Type]:
    return list(t.fields) if isinstance(t, TupleType) else [t]


def _unpack(results: list):
    return results[0] if len(results) == 1 else tuple(results)


def _stack(items: list, axis: int, t: Type, env: dict) -> np.ndarray:
    """Stack the per-iteration scan outputs along `axis`; with no iteration, an empty array
    of the result type (dimensions only known at run time taken as 0)."""
    if items:
        return np.stack(items, axis=axis % (np.ndim(items[0]) + 1))
    assert isinstance(t, TensorType)
    shape = []
    for d in t.shape:
        try:
            shape.append(int(evaluate(d, env)))
        except KeyError:
            shape.append(0)
    return np.zeros(shape, to_numpy(t.dtype))


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
