"""Expansion of ONNX ops that the standard defines as functions of other ops.

When tcc has no converter for an op but the ONNX schema gives it a function body (e.g.
MeanVarianceNormalization, or the context-dependent bodies of the loss ops), the node is
replaced by that body: formal inputs/outputs are renamed to the node's values, internal
values get a unique prefix, and attribute references take the node's attributes (or the
schema's defaults). The body's nodes are then converted as usual (recursively expanded).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.base import normalize_domain

if TYPE_CHECKING:
    import onnx

_counter = itertools.count()


def _schema(op_type: str, domain: str, opset: int):
    import onnx.defs  # the schemas are onnx's C++ library: imported only when an op needs them

    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None


def _best_version(versions, opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def has_function(op_type: str, domain: str, opset: int) -> bool:
    """True when the ONNX schema defines `op_type` at `opset` by a function body."""
    s = _schema(op_type, domain, opset)
    if s is None:
        return False
    return (
        _best_version(s.function_opset_versions, opset) is not None
        or _best_version(s.context_dependent_function_opset_versions, opset) is not None
    )


def function_body(
    node: onnx.NodeProto, opset: int, input_types: list[onnx.TypeProto | None]
) -> onnx.FunctionProto | None:
    """The function body of `node`'s op at `opset`, or None when there is none."""
    s = _schema(node.op_type, normalize_domain(node.domain), opset)
    if s is None:
        return None
    fp = proto.FunctionProto()
    v = _best_version(s.function_opset_versions, opset)
    if v is not None:
        fp.ParseFromString(s.get_function_with_opset_version(v))
        return fp
    v = _best_version(s.context_dependent_function_opset_versions, opset)
    if v is None:
        return None
    types = [(t or proto.TypeProto()).SerializeToString() for t in input_types]
    try:
        data = s.get_context_dependent_function_with_opset_version(v, node.SerializeToString(), types)
    except Exception:
        return None
    fp.ParseFromString(data)
    return fp


def expand(node: onnx.NodeProto, opset: int, fp: onnx.FunctionProto) -> tuple[list[onnx.NodeProto], dict[str, int]]:
    """The body of `fp` instantiated for `node`: its nodes and the body's opsets."""
    prefix = f"{node.name or node.op_type}__fn{next(_counter)}__"
    rename: dict[str, str] = {"": ""}
    for i, formal in enumerate(fp.input):
        rename[formal] = node.input[i] if i < len(node.input) else ""
    for i, formal in enumerate(fp.output):
        rename[formal] = node.output[i] if i < len(node.output) else prefix + formal
    attrs = {a.name: a for a in node.attribute}
    schema = _schema(node.op_type, normalize_domain(node.domain), opset)
    defaults = {}
    if schema is not None:
        for name, a in schema.attributes.items():
            if a.default_value is not None and a.default_value.type != 0:
                defaults[name] = a.default_value
    for a in fp.attribute_proto:
        defaults.setdefault(a.name, a)

    nodes = []
    for body_node in fp.node:
        n = proto.NodeProto()
        n.CopyFrom(body_node)
        n.name = prefix + (body_node.name or body_node.op_type)
        del n.input[:]
        del n.output[:]
        n.input.extend(rename.setdefault(x, prefix + x) for x in body_node.input)
        n.output.extend(rename.setdefault(x, prefix + x) for x in body_node.output)
        new_attrs = []
        for a in body_node.attribute:
            if a.type in (proto.AttributeProto.GRAPH, proto.AttributeProto.GRAPHS):
                a = _renamed_attribute(a, rename)
            if a.ref_attr_name:
                src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if src is None:
                    continue
                b = proto.AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                new_attrs.append(b)
            else:
                new_attrs.append(a)
        del n.attribute[:]
        n.attribute.extend(new_attrs)
        nodes.append(n)
    opsets = {normalize_domain(o.domain): o.version for o in fp.opset_import}
    return nodes, opsets


def _renamed_attribute(a: onnx.AttributeProto, rename: dict[str, str]) -> onnx.AttributeProto:
    """A copy of a graph-valued attribute whose subgraphs read the renamed outer values."""
    b = proto.AttributeProto()
    b.CopyFrom(a)
    for g in [b.g] if b.type == proto.AttributeProto.GRAPH else list(b.graphs):
        _rename_captures(g, rename)
    return b


def _rename_captures(g: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename, in place, the outer-scope values a subgraph reads (its own names shadow)."""
    local = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    local |= {out for node in g.node for out in node.output}
    outer = {k: v for k, v in rename.items() if k and k not in local}
    for node in g.node:
        for i, name in enumerate(node.input):
            if name in outer:
                node.input[i] = outer[name]
        for a in node.attribute:
            for sub in [a.g] if a.type == proto.AttributeProto.GRAPH else list(a.graphs):
                _rename_captures(sub, outer)
    for vi in g.output:
        if vi.name in outer:
            vi.name = outer[vi.name]
