"""Shared helpers for the op tests (tests/ir/ops) and the ONNX converter tests (tests/frontend).

Op level: `infer` gives the result type of one call, `ref` calls an op's numpy reference
directly, and `run_op` runs one call through the reference interpreter (which also checks the
result against the inferred type).

ONNX level: `onnx_model` and `node_model` build small models, `run_ort` runs one on
onnxruntime, and `assert_matches_ort` imports a model, runs it on the interpreter and compares
every output with onnxruntime. Tolerances are always the caller's: each test file states its own.

Import with `from tests.helpers import ...` (the suite runs with --import-mode=importlib).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.builder import FunctionBuilder, infer_call
from tcc.ir.dtype import from_numpy
from tcc.ir.expr import prove_equal
from tcc.ir.graph import Call, TensorType, TupleType
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import get_op, normalize_attrs

# -- ops ---------------------------------------------------------------------------------------


def infer(op: str, *types, **attrs):
    """The result type of `op` on parameters of the given types (None: an absent operand).

    Goes through `infer_call`, as the builder does: operand count, attributes (defaults
    filled, unknown ones rejected), then the op's own inference."""
    bb = FunctionBuilder()
    args = [None if t is None else bb.param(f"a{i}", t) for i, t in enumerate(types)]
    return infer_call(op, args, attrs)[1]


def ref(op: str, *arrays, **attrs):
    """The op's numpy reference called directly on `arrays`, attributes normalized."""
    opdef = get_op(op)
    return opdef.ref(*arrays, **normalize_attrs(opdef, attrs))


def run_op(op: str, *arrays, **attrs):
    """One call of `op` on `arrays` (None: an absent operand) through the reference interpreter.

    Returns the result array, or a list with one array per field when the result is a tuple."""
    bb = FunctionBuilder()
    args, feeds = [], []
    for i, a in enumerate(arrays):
        if a is None:
            args.append(None)
            continue
        a = np.asarray(a)
        args.append(bb.param(f"a{i}", TensorType(a.shape, from_numpy(a.dtype))))
        feeds.append(a)
    out = bb.emit(op, *args, **attrs)
    is_tuple = isinstance(out.type, TupleType)
    outs = [bb.get_item(out, i) for i in range(len(out.type.fields))] if is_tuple else [out]
    mod = IRModule()
    mod.functions["main"] = bb.finish(outs, [f"y{i}" for i in range(len(outs))])
    result = run(mod, feeds)
    return result if is_tuple else result[0]


def same_shape(got, want) -> bool:
    """Shapes of equal rank whose dims are provably equal (symbolic dims included)."""
    return len(got) == len(want) and all(prove_equal(a, b) for a, b in zip(got, want))


def assert_close(got, want, *, rtol: float, atol: float) -> None:
    """Same dtype, same shape and allclose, for one array or two equally long sequences."""
    if isinstance(got, np.ndarray) or isinstance(want, np.ndarray):
        got, want = [got], [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- ONNX models -------------------------------------------------------------------------------


def _elem_type(elem) -> int:
    """An ONNX element type from a TensorProto code or anything `np.dtype` accepts."""
    return elem if isinstance(elem, int) else helper.np_dtype_to_tensor_dtype(np.dtype(elem))


def value_info(name: str, elem, shape) -> ValueInfoProto:
    """A tensor value info. `elem`: a TensorProto code or a numpy dtype; `shape`: str dims are
    symbolic, None leaves the rank unknown."""
    return helper.make_tensor_value_info(name, _elem_type(elem), shape)


def _as_value_info(v) -> ValueInfoProto:
    return v if isinstance(v, ValueInfoProto) else value_info(*v)


def _as_tensor(t) -> TensorProto:
    if isinstance(t, TensorProto):
        return t
    name, value = t
    return numpy_helper.from_array(np.asarray(value), name)


def onnx_model(
    nodes: NodeProto | Sequence[NodeProto],
    inputs: Sequence,
    outputs: Sequence,
    initializers: Sequence = (),
    opset: int = 17,
    *,
    ir_version: int | None = None,
    extra_opsets: Sequence[tuple[str, int]] = (),
) -> ModelProto:
    """A model of graph `nodes` (one node or a list).

    `inputs`/`outputs`: ValueInfoProtos or (name, elem, shape) triples (see `value_info`).
    `initializers`: TensorProtos or (name, array) pairs. `opset` is the default domain's;
    `extra_opsets` adds (domain, version) pairs. `ir_version`: None keeps onnx's default."""
    if isinstance(nodes, NodeProto):
        nodes = [nodes]
    graph = helper.make_graph(
        list(nodes),
        "g",
        [_as_value_info(v) for v in inputs],
        [_as_value_info(v) for v in outputs],
        [_as_tensor(t) for t in initializers],
    )
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(domain, version) for domain, version in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def node_model(
    op_type: str,
    inputs: Mapping[str, Any],
    outputs: int | Sequence[str] = 1,
    *,
    initializers: Sequence = (),
    opset: int = 17,
    **attrs,
) -> ModelProto:
    """A model of one `op_type` node with attributes `attrs`.

    `inputs` maps graph input names, in operand order, to a numpy array (its dtype and shape),
    an (elem, shape) pair, or None for an absent optional operand (named "" on the node).
    The initializers (as for `onnx_model`) follow as the last operands. `outputs`: a count
    (named y0, y1, ...) or names ("" for an unused output); their types are left to infer."""
    vis, names = [], []
    for name, spec in inputs.items():
        names.append("" if spec is None else name)
        if spec is None:
            continue
        if isinstance(spec, (np.ndarray, np.generic)):
            spec = (spec.dtype, spec.shape)
        vis.append(value_info(name, *spec))
    inits = [_as_tensor(t) for t in initializers]
    names += [t.name for t in inits]
    outs = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op_type, names, outs, **attrs)
    out_vis = [helper.make_empty_tensor_value_info(o) for o in outs if o]
    return onnx_model(node, vis, out_vis, inits, opset)


def run_ort(model: ModelProto, feeds: Mapping[str, Any]) -> list[np.ndarray]:
    """`model` run on onnxruntime's CPU provider; feeds that are None (absent inputs) are
    dropped."""
    import onnxruntime as ort  # here, so that files which importorskip it can import this one

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v for k, v in feeds.items() if v is not None})


def assert_matches_ort(model: ModelProto, feeds, *, rtol: float, atol: float) -> IRModule:
    """Import `model`, run it on the interpreter and check that it gives as many outputs as
    onnxruntime, each with the same dtype and shape and allclose. Returns the module."""
    mod = from_onnx(model)
    assert_close(run(mod, feeds), run_ort(model, feeds), rtol=rtol, atol=atol)
    return mod


def calls(mod: IRModule, fn: str = "main") -> list[Call]:
    """The calls bound in `mod[fn]`, in order."""
    return [b.value for b in mod[fn].bindings if isinstance(b.value, Call)]


def call_ops(mod: IRModule, fn: str = "main") -> list[str]:
    """The op names of the calls bound in `mod[fn]`, in order."""
    return [c.op for c in calls(mod, fn)]


def run_compute(op: str, *arrays, **attrs) -> list[np.ndarray]:
    """Run `op`'s loop program (te -> PrimFunc -> tcc.ir.tir_eval) on numpy arrays (None for
    an absent optional operand); returns the outputs, shaped as the op's inference says."""
    from tcc.ir.expr import Var, evaluate
    from tcc.ir.tir_eval import run_prim_func
    from tcc.lower.legalize import op_prim_func

    types = [None if a is None else TensorType(np.shape(a), from_numpy(np.asarray(a).dtype)) for a in arrays]
    attrs = normalize_attrs(get_op(op), attrs)
    result = get_op(op).infer(types, attrs)
    func = op_prim_func(op, types, attrs)
    assert func is not None, f"op {op} has no loop program"
    out_types = list(result.fields) if isinstance(result, TupleType) else [result]
    inputs = [np.require(a, requirements="C") for a in arrays if a is not None]
    env: dict = {}
    for t, a in zip([t for t in types if t is not None], inputs):
        for d, n in zip(t.shape, a.shape):
            if isinstance(d, Var):
                env[d] = n
    from tcc.ir.dtype import to_numpy

    outs = [np.zeros([evaluate(d, env) for d in t.shape], to_numpy(t.dtype)) for t in out_types]
    run_prim_func(func, inputs + outs)
    return outs


def assert_compute_matches_ref(op: str, *arrays, rtol: float = 1e-5, atol: float = 1e-6, **attrs) -> None:
    """The op's loop program computes what its numpy reference computes."""
    want = ref(op, *arrays, **attrs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert_close(run_compute(op, *arrays, **attrs), want, rtol=rtol, atol=atol)
