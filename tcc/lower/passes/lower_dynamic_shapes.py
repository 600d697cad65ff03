"""lower-dynamic-shapes: an op whose result shape depends on operand values (`dyn_*`)
becomes its static op over size variables read from those operands when the program runs,
as Relax does with `tensor_to_shape` and `match_cast`.

May change: in every graph function (control-flow bodies included), a binding
`y = dyn_op(...)` whose op record has a static form (`OpDef.to_static`) becomes

    s = tensor_to_shape(operand)          : Shape((sv0, sv1, ...))  one per size operand
    y_shape = shape(dims..., checks=[...]) : Shape(y's dims)        binds y's fresh sizes
    y = static_op(...)                                            same variable, same type

An op with several results (topk's values and indices, split's parts) binds the dims of
all of them, one result after another.
The static op's own result type may spell a dimension as the expression the shape binding
bound (`x * value0` for a tile) rather than the variable: the two are equal once it runs.
The shape binding also binds the further sizes a static form's attributes use (a slice's
first index and step, a reduction's extents), and a form may end in a second op (the
reshape that drops the axes a reduction kept).

An op whose result size is counted from operand values rather than held by one (a range
of float bounds) names an op that counts it (`OpDef.size_op`); its result is read as one more
shape operand.

The first binds a size variable to each value the operand holds; the second checks that the
values fit the op (a Reshape whose sizes multiply out, an Expand that broadcasts, no negative
size), each check with a message naming the node, then binds the size variables of `y`'s
type to the result dimensions; the static op then has a loop program like any other, with
the sizes a kernel cannot learn from its buffers passed as scalar arguments. A dyn op with no
static form, or whose static form refuses these operands, stays as it is.

Preserves every function's parameters, returned values and numerics: the static op computes
what the dyn op's numpy reference computes wherever the checks pass, and where one fails the
program stops with its message instead of computing anything. The input module is not
changed.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import graph as G
from tcc.ir.errors import InternalError, NoLoopProgram, ShapeError
from tcc.ir.module import IRModule
from tcc.ir.ops._util import static_length
from tcc.ir.ops.registry import get_op, normalize_attrs
from tcc.lower.passes import register_pass


def _nonneg_check(axis: int, d) -> tuple[E.PrimExpr, str] | None:
    if isinstance(d, int):
        if d < 0:
            raise ShapeError(f"result dimension {axis} is {d}")
        return None
    return E.compare("ge", d, 0), f"the size of result axis {axis} is negative"


def _lower(b: G.Binding) -> list[G.Binding] | None:
    """The bindings that replace `b`, or None to keep it."""
    call = b.value
    results = b.var.type.fields if isinstance(b.var.type, G.TupleType) else (b.var.type,)
    if not isinstance(call, G.Call) or not all(isinstance(t, G.TensorType) for t in results):
        return None
    out_dims = tuple(d for t in results for d in t.shape)  # a tuple's, one result after another
    op = get_op(call.op)
    if op.to_static is None:
        return None
    types = [None if a is None else G.type_of(a) for a in call.args]
    new: list[G.Binding] = []
    sizes: dict[int, tuple] = {}
    operands = {k: call.args[k] for k in op.shape_operands
                if k < len(call.args) and call.args[k] is not None}
    try:
        if op.size_op is not None:  # counted by a kernel, then read as one more operand
            counter = get_op(op.size_op)
            count_attrs = normalize_attrs(
                counter, {k: v for k, v in call.attrs.items() if k in counter.attrs})
            count_call = G.Call(op.size_op, call.args, count_attrs)
            count_t = counter.infer(types, count_attrs)
            count = G.Var(f"{b.var.name}_count", count_t)
            new.append(G.Binding(count, count_call))
            operands[len(call.args)], types = count, [*types, count_t]
        for k, arg in operands.items():
            n = static_length(types[k], call.op, f"operand {k}")
            shape_t = G.ShapeType(n, tuple(E.fresh_var("value") for _ in range(n)))
            read = G.Call("tensor_to_shape", (arg,), {})
            new.append(G.Binding(G.Var(f"{b.var.name}_sizes{k}", shape_t), read))
            sizes[k] = shape_t.dims
        if not sizes:  # no operand holds sizes (a reduction given its axes as an attribute)
            return None
        form = op.to_static(types, sizes, out_dims, dict(call.attrs))
    except (NoLoopProgram, ShapeError):
        return None
    where = f"{call.op} {b.var.name!r}"
    checks = [(c, f"{where}: {m}") for c, m in form.checks]
    for axis, d in enumerate(form.dims):
        check = _nonneg_check(axis, d)
        if check is not None:
            checks.append((check[0], f"{where}: {check[1]}"))
    if len(form.dims) != len(out_dims):
        raise InternalError(f"{where}: its static form gives {len(form.dims)} dimensions, "
                            f"not the {len(out_dims)} of {b.var.type}")
    bound = tuple(v for v, _ in form.binds)
    result = G.ShapeType(len(out_dims) + len(bound), (*out_dims, *bound))
    value = G.ShapeExpr((*form.dims, *(e for _, e in form.binds)), tuple(checks))
    new.append(G.Binding(G.Var(f"{b.var.name}_shape", result), value))
    static = get_op(form.op)
    args = tuple(None if i is None or i >= len(call.args) else call.args[i] for i in form.operands)
    while args and args[-1] is None:
        args = args[:-1]
    attrs = normalize_attrs(static, form.attrs)
    inferred = static.infer([None if a is None else G.type_of(a) for a in args], attrs)
    if form.then is not None:
        first = G.Var(f"{b.var.name}_{form.op}", inferred)
        new.append(G.Binding(first, G.Call(form.op, args, attrs)))
        then = get_op(form.then[0])
        args, attrs = (first,), normalize_attrs(then, form.then[1])
        inferred = then.infer([inferred], attrs)
        form = dataclasses.replace(form, op=form.then[0])
    bound_to = dict(form.binds)
    got = inferred.fields if isinstance(inferred, G.TupleType) else (inferred,)
    starts = [sum(t.ndim for t in results[:k]) for k in range(len(results))]
    if not (len(got) == len(results) and all(
            isinstance(g, G.TensorType) and g.dtype == t.dtype and len(g.shape) == t.ndim
            and all(E.prove_equal(x, y) or E.prove_equal(E.substitute(x, bound_to), d)
                    for x, y, d in zip(g.shape, t.shape, form.dims[start:]))
            for g, t, start in zip(got, results, starts))):
        raise InternalError(
            f"{where}: its static form {form.op} gives {inferred}, not {b.var.type}")
    new.append(G.Binding(b.var, G.Call(form.op, args, attrs)))
    return new


def lower_function(fn: G.Function) -> G.Function:
    bindings: list[G.Binding] = []
    changed = False
    for b in fn.bindings:
        replaced = _lower(b)
        changed |= replaced is not None
        bindings.extend(replaced or [b])
    return dataclasses.replace(fn, bindings=tuple(bindings)) if changed else fn


@register_pass("lower-dynamic-shapes")
def lower_dynamic_shapes(mod: IRModule) -> IRModule:
    functions = dict(mod.functions)
    for name, f in mod.graph_functions.items():
        functions[name] = lower_function(f)
    return IRModule(functions, dict(mod.const_types), dict(mod.const_values))
