"""pretranspose-weights: store constant gemm weights read transposed in the order they are read.

May change: a `gemm` with `trans_b` true whose B is a module constant becomes the same gemm
with `trans_b` false and B replaced by a new constant holding B transposed (computed here,
named after B with a `_t` suffix, made once per constant and shared by every such gemm). The
kernel's vector axis is j, the output column: a B stored (N, K) is read along j with a
stride of K elements (a gather per vector), one stored (K, N) contiguously. A constant that
something else still reads is kept beside its transpose; one nothing reads any more is
dropped. Left alone: `trans_a` (A is read one element per output row and broadcast, so its
layout does not decide the vector loads), a B that is not a constant, and `matmul`, whose B
is always read as (..., K, N): a transpose of a constant in front of it is already a
constant in that order, folded by constant-folding, which runs first. Preserves every
function's parameters, returned values and public names, and numerics bit for bit (each
output sums the same products in the same order). The input module is not changed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tcc.ir import graph as G
from tcc.ir.module import IRModule
from tcc.lower.passes import register_pass


def _pretransposed(mod: IRModule, call: G.Call, made: dict[str, G.Constant]) -> G.Call:
    """`call` reading its B in stored order when it is a gemm with a constant B read
    transposed; else `call` itself. `made` maps an original constant name to its transpose."""
    if call.op != "gemm" or not call.attrs["trans_b"]:
        return call
    b = call.args[1]
    value = mod.const_values.get(b.name) if isinstance(b, G.Constant) else None
    if value is None:
        return call
    if b.name not in made:
        name = mod.unique_constant_name(f"{b.name}_t")
        made[b.name] = mod.add_constant(name, np.ascontiguousarray(value.T), b.type.dtype)
    args = (call.args[0], made[b.name], *call.args[2:])
    return G.Call("gemm", args, {**call.attrs, "trans_b": False})


def _rewrite(f: G.Function, mod: IRModule, made: dict[str, G.Constant]) -> G.Function:
    bindings = []
    for b in f.bindings:
        value = _pretransposed(mod, b.value, made) if isinstance(b.value, G.Call) else b.value
        bindings.append(b if value is b.value else G.Binding(b.var, value))
    if all(new is old for new, old in zip(bindings, f.bindings)):
        return f
    return dataclasses.replace(f, bindings=tuple(bindings))


def _drop_unread(mod: IRModule, names) -> None:
    """Remove the constants among `names` that no graph function reads any more."""
    read = mod.referenced_constants()
    for name in names:
        if name not in read:
            del mod.const_types[name]
            del mod.const_values[name]


@register_pass("pretranspose-weights")
def pretranspose_weights(mod: IRModule) -> IRModule:
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    made: dict[str, G.Constant] = {}
    for name, f in mod.graph_functions.items():
        out.functions[name] = _rewrite(f, out, made)
    _drop_unread(out, made)
    return out
