"""fuse-ops: merge chains of fusable op calls into one PrimFunc each, so that intermediate
results never touch memory.

May change: in every graph function (control-flow bodies included), a group of op calls
becomes one `call_tir` of a new PrimFunc `fused_<op>_<op>..._kernel`, bound to the group's
last variable (same name, same type); the other bindings of the group disappear. A group is
grown producer by producer, following TVM's FuseOps pattern kinds: a producer whose result
only one binding uses (and the function does not return) joins that consumer when both are
elementwise/broadcast/injective (a chain), when the producer's group holds a
convolution/matmul-like or reduction "anchor" and the consumer is elementwise or broadcast
(an epilogue, such as conv2d -> add -> relu), or when the consumer is a reduction and the
producer elementwise/broadcast/injective (a prologue). An anchor's result may also have
several readers when all of them end up in the epilogue, of its shape (swish's `c *
sigmoid(c)`, GELU's `x * 0.5 * (1 + erf(x / sqrt 2))` after a matmul): the schedule's
write-back computes the epilogue from the one element it holds. But a producer group of more
than MAX_RECOMPUTED_OPS ops stays apart from a consumer with more elements than its result,
which would compute each of its elements several times. A group has at most one anchor and
MAX_GROUP ops. Views the VM runs without copying (reshape, squeeze, expand_dims) of static
shapes join groups of injective ops that move data (transposes, layout transforms), so a
chain of them through views is one kernel (ShuffleNet's channel shuffle, layout transforms
around reshape -> transpose -> reshape: three kernels, one pass over memory each, became
one); a view next to elementwise code, and views with fewer than two such ops to join, stay
views (which move nothing: a transform's own kernel keeps simple indices). A row kernel
(softmax, log_softmax: opaque, several stages of its own) anchors an epilogue of elementwise
and broadcast ops of its result's shape, which may read that result more than once (the
exporters' `where(isnan(p), 0, p)` after an attention softmax): they become its last stage,
so the row rule writes the rows once, and the row kernel's own stages stay as its loop
program has them. Ops without a loop program, other opaque ops and calls with tuple operands
or results are never grouped; singletons stay op calls for legalization. In the merged
PrimFunc the non-reduction intermediate stages are inlined (but for a row kernel's own), and
reductions keep their own stage.
Structurally equal PrimFuncs are shared, and each records in its "origins" attribute the
bindings merged into it (so profiles name the model's nodes). Preserves every function's
parameters, returned values and numerics; the input module is not changed.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import graph as G
from tcc.ir import te
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import prove_equal
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import Pattern, get_op
from tcc.ir.structural import attr_key
from tcc.ir.tir import PrimFunc
from tcc.lower.legalize import ORIGINS_ATTR, KernelTable, compute_call, placeholders
from tcc.lower.passes import register_pass
from tcc.lower.passes.plan_memory import VIEW_OPS

ANCHORS = frozenset({Pattern.COMM_REDUCE, Pattern.OUT_FUSABLE})
MAX_GROUP = 32
# A producer group of more ops than this is computed once and stored rather than fused
# into a consumer with more elements, which would recompute it for each (T5's relative-
# position buckets, 17 ops with a log, fused into the per-head gather: four times over).
MAX_RECOMPUTED_OPS = 4
MAX_NAME_OPS = 4  # op names spelled out in a fused kernel's name
# Opaque ops whose loop program is a row kernel that keeps its shape: they anchor an
# epilogue of their shape, which the row rule computes as the rows' last pass
ROW_ANCHORS = frozenset({"softmax", "log_softmax"})


def _kind(b: G.Binding) -> Pattern | None:
    """The pattern kind of a binding that may join a group; None for one that may not."""
    v = b.value
    if not isinstance(v, G.Call) or not isinstance(b.var.type, G.TensorType):
        return None
    if v.op in VIEW_OPS and not (b.var.type.is_static and G.type_of(v.args[0]).is_static):
        # over symbolic sizes a fused view's indices take real divisions: BERT's attention
        # reshapes fused into their transposes ran 1.8x slower than the views
        return None
    op = get_op(v.op)
    if op.compute is None or (op.pattern > Pattern.OUT_FUSABLE and v.op not in ROW_ANCHORS):
        return None
    if any(a is not None and not isinstance(G.type_of(a), G.TensorType) for a in v.args):
        return None
    return Pattern.OUT_FUSABLE if v.op in ROW_ANCHORS else op.pattern


def _view_beside_computation(p: G.Binding, pk: Pattern, c: G.Binding, ck: Pattern) -> bool:
    """Whether a view would join an op that computes rather than moves data: views join
    only transposes, layout transforms and other views, so elementwise code keeps its
    contiguous indices."""
    if p.value.op in VIEW_OPS:
        return ck != Pattern.INJECTIVE
    if c.value.op in VIEW_OPS:
        return pk != Pattern.INJECTIVE
    return False


def _users(fn: G.Function) -> dict[int, list[int | None]]:
    """Variable (by id) -> the indices of the bindings that read it, and None when the
    function returns it."""
    users: dict[int, list[int | None]] = {}
    for i, b in enumerate(fn.bindings):
        for key in {id(v) for v in G.used_vars(b.value)}:
            users.setdefault(key, []).append(i)
    for key in {id(v) for v in G.used_vars(fn.ret)}:
        users.setdefault(key, []).append(None)
    return users


@dataclasses.dataclass
class _Group:
    members: list[int]  # binding indices
    anchors: int
    row: bool = False  # its anchor is a row kernel (ROW_ANCHORS)


def _may_join(producer: Pattern, consumer: Pattern, pg: _Group, cg: _Group) -> bool:
    """May the group ending in `producer` merge into the group of its only user?"""
    if len(pg.members) + len(cg.members) > MAX_GROUP or pg.anchors + cg.anchors > 1:
        return False
    if consumer in ANCHORS:  # a prologue: only reductions read it in place
        return consumer == Pattern.COMM_REDUCE and producer <= Pattern.INJECTIVE
    if pg.anchors:  # an epilogue of the anchor: the schedule computes it in place
        return consumer <= Pattern.BROADCAST
    return producer <= Pattern.INJECTIVE and consumer <= Pattern.INJECTIVE


def _only_users(readers: list, consumer: int, pg: _Group, cg: _Group, produced: G.Type,
                consumed: G.Type) -> bool:
    """Whether the producer group `pg`'s result may join the consumer's group: the consumer
    is its one reader; or, for an anchor's result, every reader is in the consumer's group,
    an epilogue of its shape (the function does not return it). A row kernel's joins only
    the latter way."""
    if readers == [consumer] and not pg.row:
        return True
    if not (pg.row or pg.anchors):
        return False
    if None in readers or not G.same_shape(produced, consumed):
        return False
    return all(r == consumer or r in cg.members for r in readers)


def _expands(producer: G.Type, consumer: G.Type) -> bool:
    """Whether the consumer's result provably has more elements than the producer's: once
    each dimension of the producer (but those of size 1) is paired off with an equal one of
    the consumer, the consumer has some left, not all of them 1."""
    if not (isinstance(producer, G.TensorType) and isinstance(consumer, G.TensorType)):
        return False
    left = list(consumer.shape)
    for d in (d for d in producer.shape if not prove_equal(d, 1)):
        match = next((k for k, e in enumerate(left) if prove_equal(d, e)), None)
        if match is None:
            return False
        del left[match]
    return any(not prove_equal(d, 1) for d in left)


def _groups(fn: G.Function) -> list[list[int]]:
    """The groups of two or more bindings (indices in binding order), the last of each the
    only one whose result leaves the group."""
    kinds = [_kind(b) for b in fn.bindings]
    users = _users(fn)
    index = {id(b.var): i for i, b in enumerate(fn.bindings)}
    group_of = [_Group([i], int(k in ANCHORS), k is not None and b.value.op in ROW_ANCHORS)
                for i, (k, b) in enumerate(zip(kinds, fn.bindings))]
    for c, b in enumerate(fn.bindings):
        if kinds[c] is None:
            continue
        args = dict.fromkeys(a for a in b.value.args if isinstance(a, G.Var))
        # operands read once first: `where(isnan(p), 0, p)` takes in `isnan(p)` before `p`
        for a in sorted(args, key=lambda a: len(users.get(id(a), ())) > 1):
            p = index.get(id(a))
            if p is None or kinds[p] is None:
                continue
            pg, cg = group_of[p], group_of[c]
            if not _only_users(users.get(id(a), ()), c, pg, cg, a.type, b.var.type):
                continue
            if _view_beside_computation(fn.bindings[p], kinds[p], fn.bindings[c], kinds[c]):
                continue
            if len(pg.members) > MAX_RECOMPUTED_OPS and _expands(a.type, b.var.type):
                continue
            if _may_join(kinds[p], kinds[c], pg, cg):
                cg.members += pg.members
                cg.anchors += pg.anchors
                cg.row = cg.row or pg.row
                for i in pg.members:
                    group_of[i] = cg
    unique = {id(g): g for g in group_of}.values()
    # views join only to make one pass of two ops that move data: with one op or none,
    # they stay views, which the VM runs without copying, beside that op's kernel
    return [sorted(g.members) for g in unique if len(g.members) > 1
            and sum(fn.bindings[i].value.op not in VIEW_OPS for i in g.members) > 1]


def _operand_key(a: G.Expr):
    return ("const", a.name) if isinstance(a, G.Constant) else ("value", id(a))


def _outside_operands(members: list[G.Binding]) -> list[G.Expr]:
    """The group's operands from outside it, in parameter order (first use)."""
    inside = {id(b.var) for b in members}
    outside: dict[tuple, G.Expr] = {}
    for b in members:
        for a in b.value.args:
            if a is not None and id(a) not in inside:
                outside.setdefault(_operand_key(a), a)
    return list(outside.values())


def _signature(members: list[G.Binding], operands: list[G.Expr]) -> tuple:
    """Everything the group's PrimFunc is made of: each member's op, attributes, result
    type and operands (an earlier member, or a parameter by position), and the parameter
    types. Groups with one signature get one PrimFunc."""
    inside = {id(b.var): i for i, b in enumerate(members)}
    param = {_operand_key(a): i for i, a in enumerate(operands)}
    sig = []
    for b in members:
        args = tuple(None if a is None else ("member", inside[id(a)]) if id(a) in inside
                     else ("param", param[_operand_key(a)]) for a in b.value.args)
        sig.append((b.value.op, attr_key(b.value.attrs), args, b.var.type))
    return tuple(sig), tuple(G.type_of(a) for a in operands)


def _group_prim_func(members: list[G.Binding], operands: list[G.Expr]) -> PrimFunc | None:
    """The PrimFunc computing the group's last binding from the group's outside operands
    (`_outside_operands`, its parameters in order), or None when the group has no single
    loop program (an op refuses these operand types, or a size variable would be unknown)."""
    holders = placeholders([G.type_of(a) for a in operands])
    tensors = {_operand_key(a): h for a, h in zip(operands, holders)}
    kept: list[te.Tensor] = []  # a row kernel's own elementwise stages (softmax's exps)
    for b in members:
        args = [None if a is None else tensors[_operand_key(a)] for a in b.value.args]
        try:
            outs = compute_call(b.value.op, args, dict(b.value.attrs), b.var.type)
        except NoLoopProgram:
            return None
        if len(outs) != 1:  # a loop program of several outputs
            return None
        if b.value.op in ROW_ANCHORS:
            kept += _own_stages(outs[0], args)
        tensors[_operand_key(b.var)] = outs[0]
    (result,) = te.inline_injective([tensors[_operand_key(members[-1].var)]], keep=kept)
    try:
        return te.create_prim_func([*holders, result])
    except ShapeError:  # the group has no single loop program
        return None


def _own_stages(out: te.Tensor, args: list) -> list[te.Tensor]:
    """The elementwise stages of one op's loop program: between its operands `args` and
    its result `out`, neither reductions nor the result."""
    operands = {id(a) for a in args if a is not None}
    found, stack, seen = [], list(out.inputs), set()
    while stack:
        t = stack.pop()
        if id(t) in seen or id(t) in operands or t.is_placeholder:
            continue
        seen.add(id(t))
        if not isinstance(t.body, te.Reduce):
            found.append(t)
        stack.extend(t.inputs)
    return found


def _kernel_hint(ops: list[str]) -> str:
    names = ops[:MAX_NAME_OPS]
    if len(ops) > MAX_NAME_OPS:
        names.append(f"{len(ops) - MAX_NAME_OPS}_more")
    return "_".join(["fused", *names])


class _Fuser:
    def __init__(self, mod: IRModule):
        self.out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
        self.kernels = KernelTable(self.out.functions)
        # signature -> PrimFunc: a model repeats its groups (ResNet-50's 16 bottlenecks
        # have 9 shapes), and building a loop program costs far more than its signature
        self.built: dict[tuple, PrimFunc | None] = {}

    def kernel(self, members: list[G.Binding]) -> G.CallTIR | None:
        operands = _outside_operands(members)
        key = _signature(members, operands)
        if key not in self.built:
            self.built[key] = _group_prim_func(members, operands)
        func = self.built[key]
        if func is None:
            return None
        name = self.kernels.add(func, _kernel_hint([b.value.op for b in members]))
        shared = self.out.functions[name]
        origins = dict.fromkeys(dict(shared.attrs).get(ORIGINS_ATTR, ()))
        origins.update(dict.fromkeys(b.var.name for b in members))
        attrs = tuple((k, v) for k, v in shared.attrs if k != ORIGINS_ATTR)
        self.out.functions[name] = dataclasses.replace(
            shared, attrs=attrs + ((ORIGINS_ATTR, tuple(origins)),))
        return G.CallTIR(name, tuple(operands), members[-1].var.type, te.scalar_params(func))

    def function(self, fn: G.Function) -> G.Function:
        replaced: dict[int, G.Expr | None] = {}  # binding index -> its new value (None: gone)
        for group in _groups(fn):
            members = [fn.bindings[i] for i in group]
            call = self.kernel(members)
            if call is not None:
                replaced.update(dict.fromkeys(group[:-1]))
                replaced[group[-1]] = call
        if not replaced:
            return fn
        bindings = [
            b if i not in replaced else G.Binding(b.var, replaced[i])
            for i, b in enumerate(fn.bindings)
            if i not in replaced or replaced[i] is not None
        ]
        return dataclasses.replace(fn, bindings=tuple(bindings))


@register_pass("fuse-ops")
def fuse_ops(mod: IRModule) -> IRModule:
    fuser = _Fuser(mod)
    for name, f in mod.graph_functions.items():
        fuser.out.functions[name] = fuser.function(f)
    return fuser.out
