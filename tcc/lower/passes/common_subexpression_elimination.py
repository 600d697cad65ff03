"""common-subexpression-elimination: compute each distinct op call once per function.

May change: a binding `b = op(args, attrs)` that repeats an earlier `a = op(args, attrs)` in
the same graph function (same op, the same operand variables, references to the same named
constant, and equal attributes) is removed and every later use of `b` reads `a`. Only calls
whose result types are equal merge, so a result whose dimensions are fresh per call (as a
data-dependent shape makes them) is never conflated with another. Preserves each
function's parameters, returned values (by position and public name) and numerics: op
calls are pure. Unused bindings are left for dead-code-elimination; the input module is
not changed.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import graph as G
from tcc.ir.module import IRModule
from tcc.ir.structural import attr_key
from tcc.lower.passes import register_pass


def _operand_key(a):
    if a is None:
        return None
    if isinstance(a, G.Constant):
        return ("const", a.name)
    return ("value", id(a))


def _eliminate(fn: G.Function) -> G.Function:
    mapping: dict[int, G.Var] = {}
    seen: dict[tuple, G.Var] = {}
    kept = []
    for b in fn.bindings:
        value = G.substitute_vars(b.value, mapping)
        if isinstance(value, G.Call):
            key = (value.op, tuple(_operand_key(a) for a in value.args), attr_key(value.attrs))
            first = seen.get(key)
            if first is not None and first.type == b.var.type:
                mapping[id(b.var)] = first
                continue
            seen.setdefault(key, b.var)
        kept.append(b if value is b.value else G.Binding(b.var, value))
    if not mapping:
        return fn
    return dataclasses.replace(fn, bindings=tuple(kept), ret=G.substitute_vars(fn.ret, mapping))


@register_pass("common-subexpression-elimination")
def common_subexpression_elimination(mod: IRModule) -> IRModule:
    functions = {
        name: _eliminate(f) if isinstance(f, G.Function) else f
        for name, f in mod.functions.items()
    }
    return IRModule(functions, dict(mod.const_types), dict(mod.const_values))
