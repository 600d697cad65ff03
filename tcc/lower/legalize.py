"""Legalization: every graph op call with a loop program becomes a `call_tir` of a PrimFunc.

For each `Call` whose op record has a `compute`, the op's te program is instantiated on
placeholders of the operands' (symbolic) types and turned into a PrimFunc; identical
PrimFuncs (by structural hash) are shared, so a model with 50 identical convolutions has
one kernel. Calls of ops without a loop program are left as they are (the VM runs a few,
such as reshape views, as builtins; `tcc emit` names the rest). Graph semantics are
unchanged: each call_tir computes what the op's numpy reference computes.

`kernel_origins` says which graph bindings call each PrimFunc. The frontend names a binding
after the ONNX node output it computes, so this is how a profile of the compiled kernels
points back at the model's nodes.
"""

from __future__ import annotations

import dataclasses
import re

from tcc.ir import facts, te
from tcc.ir.builder import infer_call
from tcc.ir.errors import InternalError, NoLoopProgram
from tcc.ir.expr import PrimExpr, Var, free_vars
from tcc.ir.fields import field_names
from tcc.ir.graph import (
    Binding,
    Call,
    CallTIR,
    Function,
    OptionalType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    type_of,
)
from tcc.ir.module import IRModule
from tcc.ir.ops._storage_types import decode, encode
from tcc.ir.ops.registry import get_op, normalize_attrs
from tcc.ir.structural import attr_key, structural_hash
from tcc.ir.tir import PrimFunc
from tcc.ir.verify import PRECONDITIONS_ATTR
from tcc.lower.schedule.blocks import func_vars

# PrimFunc attribute: the graph bindings whose computation the PrimFunc merges.
ORIGINS_ATTR = "origins"


def op_prim_func(op_name: str, arg_types: list[Type | None], attrs: dict) -> PrimFunc | None:
    """The PrimFunc of one op call (operands as placeholders, then outputs), or None when
    the op has no loop program."""
    op = get_op(op_name)
    if op.loop_program is not None:
        return op.loop_program(arg_types, attrs)
    if op.compute is None:
        return None
    for t in arg_types:
        if t is not None and not isinstance(t, TensorType):
            raise InternalError(f"op {op_name}: loop programs take tensors, got {t}")
    holders = placeholders(arg_types)
    try:
        outs = compute_call(op_name, holders, attrs)
    except NoLoopProgram:
        return None
    return te.create_prim_func([h for h in holders if h is not None] + outs)


def compute_call(op_name: str, args: list[te.Tensor | None], attrs: dict,
                 result_type: Type | None = None) -> list[te.Tensor]:
    """The te outputs of one op call on `args` (its result type inferred when not given). On
    bfloat16 operands the op computes on the float32 values they hold and each bfloat16
    result is rounded once at the end, as the reference does (numpy on float32 arrays, the
    result rounded to bfloat16)."""
    op = get_op(op_name)
    if not any(a is not None and a.dtype == "bfloat16" for a in args):
        out = op.compute(*args, **attrs)
        return list(out) if isinstance(out, (list, tuple)) else [out]
    if result_type is None:
        result_type = op.infer([None if a is None else TensorType(a.shape, a.dtype) for a in args],
                               normalize_attrs(op, attrs))
    wide = [a if a is None or a.dtype != "bfloat16" else te.compute(
        a.shape, lambda *i, a=a: decode(a[i]), f"{a.name}_float32") for a in args]
    out = op.compute(*wide, **attrs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    types = result_type.fields if isinstance(result_type, TupleType) else (result_type,)
    return [te.compute(o.shape, lambda *i, o=o: encode(o[i], "bfloat16"), f"{o.name}_bfloat16")
            if t.dtype == "bfloat16" and o.dtype == "float32" else o
            for o, t in zip(outs, types)]


def placeholders(arg_types: list[TensorType | None]) -> list[te.Tensor | None]:
    """The te inputs `in0, in1, ...` of a kernel taking operands of `arg_types` (None for an
    absent operand), with compound dimensions generalized (see `_generalized`)."""
    return [
        None if t is None else te.placeholder(t.shape, t.dtype, f"in{i}")
        for i, t in enumerate(_generalized(arg_types))
    ]


def _expr_key(e) -> tuple:
    if isinstance(e, Var):
        return ("var", id(e))
    if dataclasses.is_dataclass(e):
        return (type(e).__name__, *(_expr_key(getattr(e, fname)) for fname in field_names(e)))
    return ("leaf", e)


def _generalized(types: list[TensorType | None]) -> list[TensorType | None]:
    """Replace each compound dimension (`batch * seq`) whose variables are not dimensions on
    their own by a fresh size variable: a kernel binds size variables from whole dimensions
    of its buffers, and the graph still allocates with the original expression."""
    standalone = {id(d) for t in types if t is not None for d in t.shape if isinstance(d, Var)}
    fresh: dict[tuple, Var] = {}
    out: list[TensorType | None] = []
    for t in types:
        if t is None:
            out.append(None)
            continue
        dims = []
        for d in t.shape:
            if isinstance(d, PrimExpr) and not isinstance(d, Var):
                if any(id(v) not in standalone for v in free_vars(d)):
                    d = fresh.setdefault(_expr_key(d), Var(f"d{len(fresh)}"))
            dims.append(d)
        out.append(TensorType(tuple(dims), t.dtype))
    return out


def _kernel_name(hint: str, used: set[str]) -> str:
    # The suffix keeps kernel symbols apart from C library names (`exp`, `round`, ...).
    base = re.sub(r"\W", "_", hint) + "_kernel"
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    return name


def with_size_ranges(func: PrimFunc) -> PrimFunc:
    """`func` with the ranges of its size variables (tcc.ir.facts: the ranges its caller
    checks at entry) among its preconditions, which its entry checks and every proof over
    it may use (tcc.ir.verify); `func` itself when the facts give none."""
    ranges = facts.known_ranges()
    if not ranges:
        return func
    sizes = func_vars(func)
    conds = [c for var in sorted((v for v in ranges if id(v) in sizes), key=lambda v: v.name)
             for c in facts.conditions(var, ranges[var])]
    attrs = dict(func.attrs)
    have = tuple(attrs.get(PRECONDITIONS_ATTR, ()))
    conds = [c for c in conds if c not in have]
    if not conds:
        return func
    kept = tuple((k, v) for k, v in func.attrs if k != PRECONDITIONS_ATTR)
    return dataclasses.replace(func, attrs=kept + ((PRECONDITIONS_ATTR, (*have, *conds)),))


class KernelTable:
    """Adds PrimFuncs to a module's functions, once per structure: a PrimFunc equal to one
    added before (by structural hash) reuses that one's name."""

    def __init__(self, functions: dict):
        self.functions = functions
        self.by_hash: dict[str, str] = {}
        # id -> (func as given, as added, its hash): callers hand in the PrimFunc they built
        # for a signature each time that signature recurs, and hashing it again costs as
        # much as the first time
        self.hashed: dict[int, tuple[PrimFunc, PrimFunc, str]] = {}

    def add(self, func: PrimFunc, hint: str) -> str:
        """The name of `func` in the module, `<hint>_kernel` (made unique) when it is new,
        with the ranges tcc.ir.facts gives its size variables among its preconditions."""
        known = self.hashed.get(id(func))
        if known is None or known[0] is not func:
            ranged = with_size_ranges(func)
            known = self.hashed[id(func)] = (func, ranged, structural_hash(ranged))
        _, func, key = known
        name = self.by_hash.get(key)
        if name is None:
            name = _kernel_name(hint, set(self.functions))
            self.functions[name] = func
            self.by_hash[key] = name
        return name


class _Legalizer:
    def __init__(self, mod: IRModule, keep: frozenset[str]):
        self.mod = mod
        self.keep = keep
        self.out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
        self.kernels = KernelTable(self.out.functions)
        # (op, operand types, attributes) -> kernel: a model repeats its op calls (DenseNet's
        # 18 Winograd transforms of 6 shapes), and building a loop program costs far more
        # than looking up its signature
        self.built: dict[tuple, tuple[str, tuple] | None] = {}

    def kernel_for(self, call: Call) -> tuple[str, tuple] | None:
        """The kernel of one op call and the size variables it takes, or None."""
        types = [None if a is None else type_of(a) for a in call.args]
        key = (call.op, tuple(types), attr_key(call.attrs))
        if key not in self.built:
            func = op_prim_func(call.op, types, dict(call.attrs))
            self.built[key] = None if func is None else (self.kernels.add(func, call.op),
                                                         te.scalar_params(func))
        return self.built[key]

    def function(self, f: Function) -> Function:
        bindings = []
        for b in f.bindings:
            value = b.value
            if (
                isinstance(value, Call)
                and value.op not in self.keep
                and isinstance(b.var.type, (TensorType, TupleType))
            ):
                built = self.kernel_for(value)
                if built is not None:
                    kernel, sizes = built
                    args = tuple(a for a in value.args if a is not None)
                    value = CallTIR(kernel, args, b.var.type, sizes)
            bindings.append(Binding(b.var, value))
        return dataclasses.replace(f, bindings=tuple(bindings))


def legalize(mod: IRModule, keep: frozenset[str] = frozenset()) -> IRModule:
    """A new module in which op calls with loop programs are call_tir's of shared PrimFuncs.

    Calls of the ops in `keep` stay op calls (e.g. reshapes the runtime does as views).
    Recurrent and dynamic-shape ops the graph passes left (with the passes skipped) are
    lowered first."""
    from tcc.lower.passes.lower_dynamic_shapes import lower_dynamic_shapes
    from tcc.lower.passes.lower_recurrent import lower_recurrent

    with facts.assuming(facts.module_ranges(mod)):  # the sizes' ranges the functions check
        mod = lower_dynamic_shapes(lower_recurrent(mod))
        lg = _Legalizer(mod, keep)
        for name, f in mod.graph_functions.items():
            lg.out.functions[name] = lg.function(f)
        return lg.out


def kernel_origins(mod: IRModule) -> dict[str, list[str]]:
    """PrimFunc name -> names of the bindings that call it (every graph function, in module
    and binding order, first use first, without repeats). A PrimFunc that several bindings
    were merged into (by fuse-ops) names them in its ORIGINS_ATTR attribute; those count."""
    seen: dict[str, dict[str, None]] = {}  # dicts keep first-insertion order
    for f in mod.graph_functions.values():
        for b in f.bindings:
            if isinstance(b.value, CallTIR):
                names = seen.setdefault(b.value.func, {})
                func = mod.functions.get(b.value.func)
                merged = dict(func.attrs).get(ORIGINS_ATTR) if isinstance(func, PrimFunc) else None
                names.update(dict.fromkeys(merged or (b.var.name,)))
    return {func: list(names) for func, names in seen.items()}


def no_loop_reason(call: Call) -> str:
    """Why an op call has no loop program: what its loop program says it does not cover."""
    op = get_op(call.op)
    types = [None if a is None else type_of(a) for a in call.args]
    if any(isinstance(t, (SequenceType, OptionalType)) for t in types) or isinstance(
            infer_call(call.op, call.args, dict(call.attrs))[1], (SequenceType, OptionalType)):
        return (f"op {call.op} works on sequences or optionals, which only the reference "
                "interpreter runs")
    if op.loop_program is not None:
        return f"op {call.op}: its loop program does not take these operand types"
    if op.compute is None:
        return f"op {call.op} has no loop program"
    try:
        op.compute(*placeholders(types),
                   **dict(call.attrs))
    except NoLoopProgram as e:
        return str(e)
    return f"op {call.op}: its operands have no loop program"


def unlegalized_calls(mod: IRModule) -> list[tuple[str, Call]]:
    """The op calls left in the graph functions, with the names they are bound to."""
    return [(b.var.name, b.value) for f in mod.graph_functions.values() for b in f.bindings
            if isinstance(b.value, Call)]


def unlegalized_ops(mod: IRModule) -> dict[str, int]:
    """Op calls left in the graph functions, by op name, with their counts."""
    counts: dict[str, int] = {}
    for _, call in unlegalized_calls(mod):
        counts[call.op] = counts.get(call.op, 0) + 1
    return counts
