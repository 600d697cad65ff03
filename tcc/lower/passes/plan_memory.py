"""plan-memory: static memory planning of a legalized graph function (an analysis).

Decides which kernel outputs live inside an arena, one buffer per function call in which
each of them gets an offset, as TFLite's arena planner and TVM's StaticPlanBlockMemory do;
the VM compiler (`tcc.emit.vm`) then emits one `alloc_arena` per arena and an `arena_view`
per planned output. It changes no IR: `plan_memory(fn)` returns a `MemoryPlan`.

* **Candidates** are the tensor outputs of `call_tir` bindings. A candidate that the function
  returns, directly or through a view, a tuple or a control-flow node that may hand it back,
  is not planned: the caller owns returned tensors.
* **Lifetime**: from its binding to the last binding that reads it or any value that may
  alias it (a view op's result, a tuple holding it, the result of an If/Loop/Scan it is an
  argument of). The bodies of If/Loop/Scan are other functions, planned on their own.
* **Arenas**: a candidate goes into the arena allocated before the first binding where every
  size variable of its byte size is bound: normally the one arena right after the prologue;
  sizes that need a variable an If/Loop/Scan result binds go into a later one. The offsets
  are not decided here but where the sizes are known, by `tcc.rt.arena.plan_arena` (at run
  time in the VM, at given sizes in reports), so one plan serves every batch size.
* **Report**: `tcc.rt.arena.memory_report(plan.arena_inputs(sizes))` gives the tensors, the
  arenas, the bytes they take allocated one by one, the arena bytes and the lower bound (the
  most bytes live at once).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import graph as G
from tcc.ir.dtype import to_numpy
from tcc.ir.module import IRModule

# Graph ops whose result is a view of their first operand's data: the VM runs them itself
# (its `reshape` builtin), so they cost no kernel, and fuse-ops leaves them alone.
VIEW_OPS = frozenset({"reshape", "squeeze", "expand_dims"})


@dataclass(frozen=True)
class PlannedTensor:
    """A kernel output inside an arena: output `output` of the call_tir at binding `binding`,
    of `nbytes` bytes (an int or a size-variable expression), live over bindings
    [start, end]."""

    binding: int
    output: int
    nbytes: E.PrimExpr | int
    start: int
    end: int


@dataclass(frozen=True)
class Arena:
    """Tensors allocated together before binding `at` (their sizes computable there), in
    binding order: an arena view names a tensor by its index here."""

    at: int
    tensors: tuple[PlannedTensor, ...]


@dataclass(frozen=True)
class MemoryPlan:
    arenas: tuple[Arena, ...]

    def places(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(binding, output) of each planned call_tir output -> (arena, tensor index)."""
        return {(t.binding, t.output): (a, k) for a, arena in enumerate(self.arenas)
                for k, t in enumerate(arena.tensors)}

    def arena_inputs(self, sizes: Mapping[str, int] | None = None) -> list:
        """Per arena, (byte sizes evaluated at `sizes` (size variable name -> value), or None
        where a variable has no value there; lifetimes): what `tcc.rt.arena.memory_report`
        takes, so the report of a plan and of the bytecode come from the same code."""
        return [([_evaluate(t.nbytes, sizes or {}) for t in a.tensors]
                 if all(_known(t.nbytes, sizes or {}) for t in a.tensors) else None,
                 [(t.start, t.end) for t in a.tensors]) for a in self.arenas]


def _known(nbytes: E.PrimExpr | int, sizes: Mapping[str, int]) -> bool:
    return isinstance(nbytes, int) or all(v.name in sizes for v in E.free_vars(nbytes))


def _evaluate(nbytes: E.PrimExpr | int, sizes: Mapping[str, int]) -> int:
    if isinstance(nbytes, int):
        return nbytes
    return int(E.evaluate(nbytes, {v: sizes[v.name] for v in E.free_vars(nbytes)}))


def tensor_bytes(t: G.TensorType) -> E.PrimExpr | int:
    """The byte size of a tensor of type `t` (an int when its shape is static)."""
    dims = [d.value if isinstance(d, E.IntImm) else d for d in t.shape]
    nbytes = math.prod(dims, start=to_numpy(t.dtype).itemsize)
    return E.simplify(nbytes) if isinstance(nbytes, E.PrimExpr) else int(nbytes)


_Alias = frozenset | tuple  # candidates a value may hold: a set, or one per tuple field


def _flat(a: _Alias) -> frozenset:
    if isinstance(a, frozenset):
        return a
    return frozenset().union(*(_flat(x) for x in a)) if a else frozenset()


def _type_vars(types) -> frozenset[str]:
    out: set[str] = set()
    for t in types:
        if isinstance(t, G.TupleType):
            out |= _type_vars(t.fields)
        elif isinstance(t, G.TensorType):
            out |= {v.name for v in E.free_vars(list(t.shape))}
    return frozenset(out)


class _Liveness:
    """Candidates of one function with their lifetimes (binding indices)."""

    def __init__(self, fn: G.Function):
        self.alias: dict[int, _Alias] = {}
        self.candidates: list[PlannedTensor] = []
        self.dies: list[int] = []
        # size variables bound before each binding: the parameters', then those a binding's
        # result type introduces (an If/Loop/Scan result binds its fresh ones)
        self.bound: list[frozenset[str]] = []
        known = _type_vars(p.type for p in fn.params)
        for i, b in enumerate(fn.bindings):
            self.bound.append(known)
            known = known | _type_vars([b.var.type])
            for v in G.used_vars(b.value):
                for c in _flat(self.alias.get(id(v), frozenset())):
                    self.dies[c] = max(self.dies[c], i)
            self.alias[id(b.var)] = self.bind(i, b.value)
        self.escaping = _flat(tuple(self.alias.get(id(v), frozenset()) for v in G.used_vars(fn.ret)))

    def of(self, e) -> _Alias:
        return self.alias.get(id(e), frozenset()) if isinstance(e, G.Var) else frozenset()

    def bind(self, i: int, v) -> _Alias:
        if isinstance(v, G.CallTIR):
            return self.call_tir(i, v)
        if isinstance(v, G.Var):
            return self.of(v)
        if isinstance(v, G.Tuple):
            return tuple(self.of(f) for f in v.fields)
        if isinstance(v, G.TupleGetItem):
            a = self.of(v.value)
            return a[v.index] if isinstance(a, tuple) else a
        if isinstance(v, G.Call) and v.op in VIEW_OPS:
            return _flat(self.of(v.args[0]))
        if isinstance(v, G.CONTROL_FLOW):  # a callee may hand back any of its arguments
            return _flat(tuple(self.of(x) for x in G.used_vars(v)))
        return frozenset()  # constants, shapes, copies: no kernel output inside

    def call_tir(self, i: int, v: G.CallTIR) -> _Alias:
        fields = v.out_type.fields if isinstance(v.out_type, G.TupleType) else (v.out_type,)
        alias: list[frozenset] = []
        for k, t in enumerate(fields):
            if isinstance(t, G.TensorType) and t.dtype != "string":
                alias.append(frozenset({len(self.candidates)}))
                self.candidates.append(PlannedTensor(i, k, tensor_bytes(t), i, i))
                self.dies.append(i)
            else:
                alias.append(frozenset())
        return tuple(alias) if isinstance(v.out_type, G.TupleType) else alias[0]

    def arena_point(self, t: PlannedTensor) -> int | None:
        """The first binding before which every size variable of `t`'s size is bound (None
        when none is by `t`'s own binding: its allocation says what is missing)."""
        names = set() if isinstance(t.nbytes, int) else {v.name for v in E.free_vars(t.nbytes)}
        return next((i for i in range(t.start + 1) if names <= self.bound[i]), None)


def plan_memory(fn: G.Function) -> MemoryPlan:
    """The memory plan of one legalized graph function."""
    live = _Liveness(fn)
    arenas: dict[int, list[PlannedTensor]] = {}
    for c, t in enumerate(live.candidates):
        at = live.arena_point(t)
        if c not in live.escaping and at is not None:
            arenas.setdefault(at, []).append(dataclasses.replace(t, end=live.dies[c]))
    return MemoryPlan(tuple(Arena(at, tuple(ts)) for at, ts in sorted(arenas.items())))


def plan_module(mod: IRModule) -> dict[str, MemoryPlan]:
    """The plan of every graph function of a legalized module, by name."""
    return {name: plan_memory(fn) for name, fn in mod.graph_functions.items()}
