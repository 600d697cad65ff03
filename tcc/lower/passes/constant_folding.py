"""constant-folding: evaluate at compile time the op calls whose operands are all constants.

May change: in every graph function (main and the callees of If/Loop/Scan alike), a binding
`v = op(operands, attrs)` whose operands are all module constants or absent (None) is
evaluated with the op's numpy reference, through the reference interpreter, and its value
becomes a new module constant named after `v`; later operands that read `v` read the
constant instead, so a chain of such calls folds in one pass. A multi-output call folds
when its result is only read through tuple items (each item becomes its own constant). A
call is left alone when its result type has a symbolic dimension or its attributes name a
size variable (its value depends on the run), when the op is nondeterministic, when the
result would store more than FOLD_MAX_BYTES and more than its operand constants (an
expand, tile or full of a small constant is cheaper to compute than to ship), when the
module holds no value for an operand (one parsed from text), or when evaluating it fails
(the failure then stays where the program would meet it at run time). A folded value the
function returns keeps its variable, bound to `identity` of the constant, since functions
return variables. The constants this pass made unreferenced (the operands of folded calls,
folded intermediates of a chain) are pruned; others are left to dead-code-elimination.
Preserves each function's parameters, returned values and public names, dtypes (bfloat16
results are rounded as the interpreter rounds them), and numerics wherever the compiled
kernel computes what the op's reference computes. The input module is not changed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tcc.ir import graph as G
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import InternalError
from tcc.ir.expr import free_vars
from tcc.ir.fields import field_names
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.lower.passes import register_pass

# A folded result may always take this many bytes; above it, only as many as its operand
# constants take together. Folding then never multiplies the weights a pack ships, while
# small tables (shape arithmetic, masks, position ids) are still computed once here.
FOLD_MAX_BYTES = 64 * 1024

# Ops whose every call may give a different value: evaluating one here would freeze a single
# draw into the weights.
NONDETERMINISTIC = frozenset({
    "bernoulli", "multinomial", "random_normal", "random_normal_like", "random_uniform",
    "random_uniform_like",
})


def _result_fields(t: G.Type) -> tuple[G.TensorType, ...] | None:
    """The tensors a call result holds when all have static shapes, else None."""
    fields = t.fields if isinstance(t, G.TupleType) else (t,)
    if all(isinstance(f, G.TensorType) and f.is_static for f in fields):
        return fields
    return None


def _nbytes(t: G.TensorType) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * to_numpy(t.dtype).itemsize


def _should_fold(call: G.Call, fields: tuple[G.TensorType, ...], mod: IRModule) -> bool:
    if call.op in NONDETERMINISTIC or free_vars(list(call.attrs.values())):
        return False
    if not all(a is None or isinstance(a, G.Constant) for a in call.args):
        return False
    operands = {a.name for a in call.args if a is not None}
    if not operands <= mod.const_values.keys():
        return False  # a module parsed from text holds constant types only
    in_bytes = sum(mod.const_values[name].nbytes for name in operands)
    return sum(_nbytes(f) for f in fields) <= max(in_bytes, FOLD_MAX_BYTES)


def _evaluate(call: G.Call, var: G.Var, mod: IRModule) -> list[np.ndarray] | None:
    """The value(s) of `var = call`, from the reference interpreter (so attribute handling,
    bfloat16 rounding and the result checks are the ones `tcc run` applies), or None when
    the op's reference rejects these operands."""
    t = var.type
    ret = (G.Tuple(tuple(G.TupleGetItem(var, i) for i in range(len(t.fields))))
           if isinstance(t, G.TupleType) else var)
    scratch = IRModule({"fold": G.Function((), (G.Binding(var, call),), ret)},
                       mod.const_types, mod.const_values)
    try:
        with np.errstate(all="ignore"):  # an inf or nan here is what the kernel makes too
            return run(scratch, [], "fold")
    except InternalError:
        raise
    except Exception:  # an op reference may raise whatever numpy raises
        return None


def _fold_call(call: G.Call, var: G.Var, mod: IRModule):
    """Evaluate `var = call` into a new constant of `mod` (a tuple of them for a tuple
    result) when folding is allowed and succeeds, else None."""
    fields = _result_fields(var.type)
    if fields is None or not _should_fold(call, fields, mod):
        return None
    values = _evaluate(call, var, mod)
    if values is None:
        return None
    if not isinstance(var.type, G.TupleType):
        return mod.add_constant(mod.unique_constant_name(var.name), values[0], fields[0].dtype)
    return tuple(mod.add_constant(mod.unique_constant_name(f"{var.name}_{i}"), v, f.dtype)
                 for i, (v, f) in enumerate(zip(values, fields)))


def _substitute(e, consts: dict[int, G.Constant], tuples: dict[int, tuple[G.Constant, ...]]):
    """`e` with folded variables read as their constants; shares unchanged nodes."""
    if isinstance(e, G.Var):
        return consts.get(id(e), e)
    if isinstance(e, G.TupleGetItem) and isinstance(e.value, G.Var) and id(e.value) in tuples:
        return tuples[id(e.value)][e.index]
    if isinstance(e, tuple):
        new = tuple(_substitute(x, consts, tuples) for x in e)
        return e if all(a is b for a, b in zip(new, e)) else new
    if isinstance(e, G.Expr) and dataclasses.is_dataclass(e):
        changes = {}
        for fname in field_names(e):
            old = getattr(e, fname)
            if isinstance(old, (G.Expr, tuple)):
                new = _substitute(old, consts, tuples)
                if new is not old:
                    changes[fname] = new
        return dataclasses.replace(e, **changes) if changes else e
    return e


def _whole_uses(fn: G.Function) -> set[int]:
    """Variables read other than as `var[i]` in a binding (every variable the function
    returns counts): a tuple result used whole must stay a variable."""
    found: set[int] = set()

    def walk(e, whole: bool) -> None:
        if isinstance(e, G.Var):
            if whole:
                found.add(id(e))
        elif isinstance(e, G.TupleGetItem):
            walk(e.value, False)
        elif isinstance(e, tuple):
            for x in e:
                walk(x, True)
        elif isinstance(e, G.Expr) and dataclasses.is_dataclass(e):
            for fname in field_names(e):
                walk(getattr(e, fname), True)

    for b in fn.bindings:
        walk(b.value, True)
    found.update(id(v) for v in _returned(fn.ret))
    return found


def _returned(e) -> list[G.Var]:
    if isinstance(e, G.Var):
        return [e]
    if isinstance(e, G.Tuple):
        return [v for f in e.fields for v in _returned(f)]
    if isinstance(e, G.TupleGetItem):
        return _returned(e.value)
    return []


def _fold_binding(value: G.Expr, var: G.Var, whole: set[int], mod: IRModule):
    """The constant(s) `var = value` stands for: an existing constant for an alias, a tuple
    item of a folded call or an identity, else new constants of `mod` when the call folds;
    None when it does not."""
    if isinstance(value, G.Constant):
        return value
    if not isinstance(value, G.Call):
        return None
    if value.op == "identity" and isinstance(value.args[0], G.Constant):
        return value.args[0]  # the constant itself, rather than a second copy of it
    if isinstance(var.type, G.TupleType) and id(var) in whole:
        return None
    return _fold_call(value, var, mod)


def _fold_function(fn: G.Function, mod: IRModule) -> G.Function:
    """Fold `fn`'s constant calls in order, adding their values to `mod`."""
    returned = {id(v) for v in _returned(fn.ret)}
    whole = _whole_uses(fn)
    consts: dict[int, G.Constant] = {}
    tuples: dict[int, tuple[G.Constant, ...]] = {}
    kept = []
    for b in fn.bindings:
        value = _substitute(b.value, consts, tuples)
        folded = _fold_binding(value, b.var, whole, mod)
        if folded is None:
            kept.append(b if value is b.value else G.Binding(b.var, value))
        elif isinstance(folded, tuple):
            tuples[id(b.var)] = folded
        else:
            consts[id(b.var)] = folded
            if id(b.var) in returned:
                kept.append(G.Binding(b.var, G.Call("identity", (folded,), {})))
    if not consts and not tuples:
        return fn
    return dataclasses.replace(fn, bindings=tuple(kept))


@register_pass("constant-folding")
def constant_folding(mod: IRModule) -> IRModule:
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    for name, f in mod.functions.items():
        if isinstance(f, G.Function):
            out.functions[name] = _fold_function(f, out)
    made_unused = (set(mod.referenced_constants()) | (set(out.const_types) - set(mod.const_types))
                   ) - out.referenced_constants()
    for name in made_unused:
        del out.const_types[name]
        out.const_values.pop(name, None)
    return out
