"""dead-code-elimination: drop what no output of the module needs.

May remove: a binding of a graph function whose variable no later binding and no returned
value uses (op calls, tuples, call_tir, If/Loop/Scan are all pure, so an unused one has no
effect), except one of type `Shape((dims...))`, which binds and checks size variables; a function that `main` cannot reach through If/Loop/Scan callees and call_tir; a
constant no remaining graph function refers to. Preserves every function's parameters,
returned values and public input/output names, so each kept function maps the same inputs
to the same outputs. A module without `main` keeps all its functions (there is no entry to
measure reachability from). The input module is not changed.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import graph as G
from tcc.ir.module import IRModule
from tcc.lower.passes import register_pass

ENTRY = "main"


def _binds_sizes(b: G.Binding) -> bool:
    """A binding of type Shape((dims...)) binds size variables later types may use (and
    checks them): it stays, whoever reads its variable."""
    return isinstance(b.var.type, G.ShapeType) and b.var.type.dims is not None


def _prune_bindings(fn: G.Function) -> G.Function:
    """Keep the bindings the returned value needs, walking them backwards once."""
    live = {id(v) for v in G.used_vars(fn.ret)}
    kept = []
    for b in reversed(fn.bindings):
        if id(b.var) in live or _binds_sizes(b):
            kept.append(b)
            live.update(id(v) for v in G.used_vars(b.value))
    if len(kept) == len(fn.bindings):
        return fn
    return dataclasses.replace(fn, bindings=tuple(reversed(kept)))


def _callees(fn) -> list[str]:
    """Names of the module functions a graph function calls."""
    if not isinstance(fn, G.Function):
        return []
    out = []
    for b in fn.bindings:
        if isinstance(b.value, G.CONTROL_FLOW):
            out.extend(b.value.callees)
        elif isinstance(b.value, G.CallTIR):
            out.append(b.value.func)
    return out


def _reachable(functions: dict) -> set[str]:
    seen, todo = set(), [ENTRY]
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        todo.extend(_callees(functions[name]))
    return seen


@register_pass("dead-code-elimination")
def dead_code_elimination(mod: IRModule) -> IRModule:
    functions = {
        name: _prune_bindings(f) if isinstance(f, G.Function) else f
        for name, f in mod.functions.items()
    }
    if ENTRY in functions:
        keep = _reachable(functions)
        functions = {name: f for name, f in functions.items() if name in keep}
    out = IRModule(functions, dict(mod.const_types), dict(mod.const_values))
    out.prune_constants()
    return out
