"""Control flow: If, Loop and Scan.

Each subgraph becomes a graph function of the module (`main_if0_then`, `main_loop0_body`,
...) whose parameters are its formal inputs followed by the outer values it reads, and the
node becomes an If/Loop/Scan graph node calling it (tcc.ir.graph). An If whose condition is
known at import time is replaced by the branch it takes, imported in place.

A loop-carried value (a Loop's carried values, a Scan's states) may change shape from one
iteration to the next. The body is first imported with the initial values' types; where a
returned dimension differs from the one taken, the body is imported again with a fresh size
variable there, so the body function accepts every iteration's values.
"""

from __future__ import annotations

import numpy as np

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.base import OnnxNode, OnnxOp, converter, normalize_domain
from tcc.frontend.onnx.importer import ImportContext, convert_node
from tcc.ir.errors import ShapeError
from tcc.ir.expr import fresh_var, prove_equal
from tcc.ir.graph import (
    Expr,
    If,
    Loop,
    Scan,
    TensorType,
    TupleType,
    Type,
    infer_control_flow,
    join_types,
    type_of,
)

# Re-imports of a body whose carried shapes keep changing before tcc gives up.
MAX_BODY_IMPORTS = 4


def _bind(ctx: ImportContext, node: OnnxNode, value: If | Loop | Scan) -> list[Expr | None]:
    """Bind a control-flow node and return one value per ONNX output (None where unused)."""
    rtype = infer_control_flow(value, ctx.mod.functions)
    n = len(rtype.fields) if isinstance(rtype, TupleType) else 1
    if len(node.outputs) > n:
        raise node.error(f"the node has {len(node.outputs)} outputs but its subgraph gives {n}")
    var = ctx.bb.bind(value, rtype, name=node.outputs[0] or node.op_type.lower())
    if n == 1:
        return [var]
    return [ctx.bb.get_item(var, i, name=o) if o else None for i, o in enumerate(node.outputs)]


# ---------------------------------------------------------------------------------------------
# If


def _inline_branch(ctx: ImportContext, node: OnnxNode, graph) -> list[None]:
    """Import the branch an import-time condition selects into the enclosing graph. ONNX
    names are unique across a graph and its subgraphs, so the branch's values keep theirs."""
    if len(graph.output) < len(node.outputs):
        raise node.error(f"branch {graph.name!r} has {len(graph.output)} outputs, "
                         f"the node {len(node.outputs)}")
    for init in graph.initializer:
        ctx.set_known(init.name, proto.to_array(init))
    for i, node_proto in enumerate(graph.node):
        domain = normalize_domain(node_proto.domain)
        convert_node(ctx, OnnxNode.from_proto(node_proto, ctx.opsets.get(domain, 1), i))
    ctx.node = node
    for out, vi in zip(node.outputs, graph.output):
        if out:
            _alias(ctx, out, vi.name)
    return [None] * len(node.outputs)


def _alias(ctx: ImportContext, new: str, old: str) -> None:
    """Make `new` another name of the value `old`, keeping what is known about it."""
    if old in ctx.sym:
        ctx.sym[new] = ctx.sym[old]
        return
    arr = ctx.known_array(old)
    if arr is not None:
        ctx.set_known(new, arr)
    else:
        ctx.values[new] = ctx.value(old)


@converter("If")
class IfOp(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        then_graph, else_graph = node.attrs["then_branch"], node.attrs["else_branch"]
        cond = ctx.const_value(node, 0)
        if cond is not None:
            taken = then_graph if bool(np.asarray(cond).reshape(-1)[0]) else else_graph
            return _inline_branch(ctx, node, taken)
        base = ctx.function_name("if")
        then = ctx.subgraph(then_graph, f"{base}_then")
        then.convert_nodes()
        then_outs = then.outputs()
        other = ctx.subgraph(else_graph, f"{base}_else")
        for name in then.captured:  # both branches take the same parameters
            other.capture(name)
        other.convert_nodes()
        else_outs = other.outputs()
        for name in other.captured:
            then.capture(name)
        if len(then_outs) != len(else_outs):
            raise node.error(f"then_branch returns {len(then_outs)} values, else_branch "
                             f"{len(else_outs)}")
        for k, (a, b) in enumerate(zip(then_outs, else_outs)):
            then_outs[k], else_outs[k] = _same_rank(then, a, other, b)
        ctx.mod.functions[then.name] = then.function(then_outs)
        ctx.mod.functions[other.name] = other.function(else_outs)
        args = tuple(then.captured.values())
        return _bind(ctx, node, If(ctx.input(node, 0), then.name, other.name, args))


def _same_rank(then: ImportContext, a: Expr, other: ImportContext, b: Expr):
    """A tcc value has one rank, but ONNX lets the branches of an If return tensors of
    different ranks. Where both are one-element tensors (a scalar on one path, shape (1,)
    on the other, as function bodies such as AffineGrid's produce) the lower-rank one is
    reshaped to the higher rank; any other rank mismatch is reported by type inference."""
    ta, tb = type_of(a), type_of(b)
    if not (isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.ndim != tb.ndim
            and all(isinstance(d, int) and d == 1 for d in ta.shape + tb.shape)):
        return a, b
    if ta.ndim < tb.ndim:
        return then.emit("reshape", a, shape=list(tb.shape)), b
    return a, other.emit("reshape", b, shape=list(ta.shape))


# ---------------------------------------------------------------------------------------------
# Loop and Scan bodies


def _import_body(ctx: ImportContext, node: OnnxNode, name: str, before: list[Type],
                 carried: list[Type], after: list[Type], first_out: int) -> ImportContext:
    """Import the body graph of a Loop/Scan as function `name`, its formal inputs `before`,
    then the carried values, then `after`; its outputs from `first_out` on are the next
    iteration's carried values. Returns the body's context; its function is in the module."""
    graph = node.attrs["body"]
    widened: set[int] = set()
    for _ in range(MAX_BODY_IMPORTS):
        snapshot = ctx.snapshot()
        body = ctx.subgraph(graph, name, before + carried + after)
        body.convert_nodes()
        outs = body.outputs()
        if len(outs) < first_out + len(carried):
            raise node.error(f"body {graph.name!r} returns {len(outs)} values; expected at "
                             f"least {first_out + len(carried)}")
        returned = [type_of(o) for o in outs[first_out : first_out + len(carried)]]
        names = [vi.name for vi in graph.input[len(before) : len(before) + len(carried)]]
        wider = _widen(node, names, carried, returned, widened)
        if wider is None:
            ctx.mod.functions[name] = body.function(outs)
            return body
        ctx.discard_since(snapshot)
        carried = wider
    raise node.error(f"the shapes of the values carried through body {graph.name!r} do not "
                     "settle; tcc cannot type this loop")


def _widen(node: OnnxNode, names: list[str], taken: list[Type], returned: list[Type],
           widened: set[int]) -> list[Type] | None:
    """The carried types with a fresh size variable wherever the body returns a dimension
    other than the one it takes; None when the body keeps every shape."""
    out, changed = [], False
    for name, t, r in zip(names, taken, returned):
        if not isinstance(t, TensorType):  # a sequence or optional: what both share
            try:
                joined = join_types(t, r, f"carried value {name!r}")
            except ShapeError as e:
                raise node.error(str(e)) from None
            changed |= joined != t
            out.append(joined)
            continue
        if not (isinstance(r, TensorType) and r.dtype == t.dtype and r.ndim == t.ndim):
            raise node.error(f"carried value {name!r} enters the body as {t} but is returned "
                             f"as {r}; dtype and rank must stay the same")
        dims = []
        for a, b in zip(t.shape, r.shape):
            if id(a) in widened or prove_equal(a, b):
                dims.append(a)
            else:
                v = fresh_var("d")
                widened.add(id(v))
                dims.append(v)
                changed = True
        out.append(TensorType(tuple(dims), t.dtype))
    return out if changed else None


def _types(values: list[Expr]) -> list[Type]:
    return [type_of(v) for v in values]


@converter("Loop")
class LoopOp(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        if not node.has_input(0) and not node.has_input(1):
            raise node.error("a Loop with neither a trip count nor a condition never ends; "
                             "give it a max_trip_count or a cond input")
        inits = [ctx.input(node, i) for i in range(2, len(node.inputs))]
        if any(v is None for v in inits):
            raise node.error("a loop-carried initial value is missing")
        flags = [TensorType((), "int64"), TensorType((), "bool")]
        name = ctx.function_name("loop") + "_body"
        body = _import_body(ctx, node, name, flags, _types(inits), [], 1)
        captured = tuple(body.captured.values())
        loop = Loop(name, ctx.input(node, 0), ctx.input(node, 1), tuple(inits), captured)
        return _bind(ctx, node, loop)


# ---------------------------------------------------------------------------------------------
# Scan


def _scan(ctx: ImportContext, node: OnnxNode, states: list[Expr], sequences: list[Expr],
          attrs: dict, body: tuple[str, tuple[Expr, ...]] | None = None) -> Scan:
    """A Scan node of `states` over `sequences`, importing its body unless `body` gives the
    name and captured values of the body function imported for an equal Scan already."""
    m, graph = len(sequences), node.attrs["body"]
    k = len(graph.output) - len(states)
    axes = tuple(attrs.get("scan_input_axes") or [0] * m)
    dirs = tuple(attrs.get("scan_input_directions") or [0] * m)
    out_axes = tuple(attrs.get("scan_output_axes") or [0] * k)
    out_dirs = tuple(attrs.get("scan_output_directions") or [0] * k)
    if len(axes) != m or len(dirs) != m or len(out_axes) != k or len(out_dirs) != k:
        raise node.error(f"the scan axes and directions need one entry per scan input ({m}) "
                         f"and per scan output ({k})")
    if body is None:
        slices = []
        for j, (v, axis) in enumerate(zip(sequences, axes)):
            t = type_of(v)
            if not -t.ndim <= axis < t.ndim:
                raise node.error(f"scan_input_axes[{j}] is {axis}, out of range for rank "
                                 f"{t.ndim}")
            axis %= t.ndim
            slices.append(TensorType(t.shape[:axis] + t.shape[axis + 1 :], t.dtype))
        name = ctx.function_name("scan") + "_body"
        ctx_body = _import_body(ctx, node, name, [], _types(states), slices, 0)
        body = (name, tuple(ctx_body.captured.values()))
    args = tuple(states) + tuple(sequences)
    return Scan(body[0], m, args, body[1], axes, dirs, out_axes, out_dirs)


@converter("Scan")
class ScanOp(OnnxOp):
    @classmethod
    def v8(cls, ctx, node):
        """Opset 8: every operand has a leading batch axis (the sequences then their scan
        axis 1) and the body sees one batch element: one Scan per element of a static
        batch, stacked again."""
        if node.has_input(0):
            raise node.error("sequence_lens is not supported; tcc scans whole sequences")
        m = node.attrs["num_scan_inputs"]
        values = [ctx.input(node, i) for i in range(1, len(node.inputs))]
        batch = type_of(values[0]).shape[0] if type_of(values[0]).ndim else None
        if not isinstance(batch, int):
            raise node.error("a Scan (opset 8) needs a static batch size")
        attrs = {"scan_input_directions": node.attrs.get("directions")}
        per_batch, body = [], None
        for b in range(batch):
            index = ctx.mod.add_constant(ctx.mod.unique_constant_name(f"{node.name}_batch{b}"),
                                         np.array(b, np.int64))
            items = [ctx.emit("gather", v, index, axis=0) for v in values]
            scan = _scan(ctx, node, items[: len(items) - m], items[len(items) - m :], attrs, body)
            body = (scan.body, scan.captured)
            per_batch.append(_bind(ctx, node, scan))
        outs = []
        for k, out in enumerate(node.outputs):
            parts = [ctx.emit("expand_dims", p[k], axes=[0]) for p in per_batch] if out else []
            outs.append(ctx.emit("concat", *parts, axis=0) if len(parts) > 1 else
                        (parts[0] if parts else None))
        return outs

    @classmethod
    def v9(cls, ctx, node):
        m = node.attrs["num_scan_inputs"]
        values = ctx.inputs(node)
        if any(v is None for v in values):
            raise node.error("every Scan operand must be given")
        n = len(values) - m
        if m < 1 or n < 0:
            raise node.error(f"num_scan_inputs is {m} for {len(values)} operands")
        return _bind(ctx, node, _scan(ctx, node, values[:n], values[n:], node.attrs))
