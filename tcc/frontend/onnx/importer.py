"""ONNX model -> IRModule with one graph function, `main`.

Initializers become named module constants (added when first used). `dim_param`
dimensions become size variables shared by name. Values known at import time (constants,
and shapes computed from other shapes) are tracked beside the graph: a converter asks for
them with `const_value` / `shape_value`, so Shape->Gather->Concat->Reshape chains fold to a
static or symbolic reshape; such a value only becomes a graph value when an op needs it
as a tensor. Calls whose operands are all small constants are evaluated at import time.

A subgraph (the branches of If, the body of Loop and Scan) is imported by a nested context
into a graph function of its own: the module (so constants are module-wide) and the
size-variable table are shared, outer constants are used directly, and every other outer
value the subgraph reads becomes an extra parameter (`captured`), since tcc functions
capture nothing implicitly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tcc.frontend.fold import emit_folded
from tcc.frontend.onnx import functions, proto, raw_data, symbolic
from tcc.frontend.onnx.base import CONVERTERS, OnnxNode, normalize_domain, onnx_dtype
from tcc.infile import not_a_file
from tcc.ir.builder import FunctionBuilder
from tcc.ir.dtype import from_numpy
from tcc.ir.errors import FrontendError, InternalError, TccError
from tcc.ir.expr import Dim, Var, as_dim
from tcc.ir.graph import (
    Constant,
    Expr,
    Function,
    OptionalType,
    SequenceType,
    TensorType,
    Type,
    type_of,
)
from tcc.ir.module import IRModule

if TYPE_CHECKING:
    import onnx


class ImportContext:
    """State of one graph import: the builder, the value table and the known values.

    `parent` is the context of the enclosing graph when this one imports a subgraph into
    the graph function `name`; `captured` lists the outer values it takes as parameters.
    """

    def __init__(self, graph: onnx.GraphProto, opsets: dict[str, int],
                 parent: ImportContext | None = None, name: str = "main",
                 lifted: dict[int, np.ndarray] | None = None):
        self.mod = parent.mod if parent else IRModule()
        self.bb = FunctionBuilder()
        self.opsets = opsets
        self.values: dict[str, Expr] = {}
        self.known: dict[str, np.ndarray] = {}
        self.sym: dict[str, tuple[list[Dim], bool, str]] = {}  # name -> (dims, is_scalar, dtype)
        self.initializers: dict[str, onnx.TensorProto] = {}
        # an initializer's raw_data, where it was read apart from the model (_load), by name
        self._raw_data: dict[str, np.ndarray] = {}
        for i, t in enumerate(graph.initializer):  # the last of a name, as a dict of them
            self.initializers[t.name] = t
            if lifted and i in lifted:
                self._raw_data[t.name] = lifted[i]
            else:
                self._raw_data.pop(t.name, None)
        self.size_vars: dict[str, Var] = parent.size_vars if parent else {}
        self.node: OnnxNode | None = None
        self.graph = graph
        self.parent = parent
        self.name = name
        self.captured: dict[str, Expr] = {}  # outer name -> outer value, in parameter order
        self._subgraphs: dict[str, int] = {}  # kind -> how many function names were handed out

    # -- reading operands -----------------------------------------------------------------

    def input(self, node: OnnxNode, i: int) -> Expr | None:
        """Operand `i` of `node` as a graph value (None when absent)."""
        if not node.has_input(i):
            return None
        return self.value(node.inputs[i])

    def inputs(self, node: OnnxNode) -> list[Expr | None]:
        return [self.input(node, i) for i in range(len(node.inputs))]

    def value(self, name: str) -> Expr:
        if name in self.values:
            return self.values[name]
        if name in self.known:
            arr = self.known[name]
            if arr.dtype == object:
                raise FrontendError(f"value {name!r}: string tensors are not supported")
            const_name = self.mod.unique_constant_name(name)
            v: Expr = self.mod.add_constant(const_name, np.asarray(arr, order="C"))
        elif name in self.sym:
            dims, scalar, dtype = self.sym[name]
            if all(isinstance(d, int) for d in dims):
                # a constant, which the converters that take it fold at import (MobileViT's
                # patch grid, ceil(8 / 2.0) * 2 in float, computed from a static size)
                self.known[name] = self.known_array(name)
                return self.value(name)
            v = self.bb.emit("shape_to_tensor", dims=list(dims), scalar=scalar, dtype=dtype, name=name)
        elif name in self.initializers:
            self.known[name] = self._initializer_array(name)
            return self.value(name)
        elif self.parent is not None and self.parent.defines(name):
            return self._from_outer(name)
        else:
            where = f" (input of {self.node.where()})" if self.node else ""
            raise FrontendError(f"value {name!r} is used before it is defined{where}; the graph is not topologically sorted or is malformed")
        self.values[name] = v
        return v

    def _initializer_array(self, name: str) -> np.ndarray:
        try:
            return proto.to_array(self.initializers[name], self._raw_data.get(name))
        except Exception as e:
            raise FrontendError(f"initializer {name!r} cannot be read: {e}") from None

    def const_value(self, node: OnnxNode, i: int) -> np.ndarray | None:
        """The value of operand `i` when known at import time, else None."""
        if not node.has_input(i):
            return None
        return self.known_array(node.inputs[i])

    def known_array(self, name: str) -> np.ndarray | None:
        """The value of `name` when known at import time here or in an enclosing graph."""
        if name in self.known:
            return self.known[name]
        if name in self.initializers and name not in self.values:
            self.known[name] = self._initializer_array(name)
            return self.known[name]
        if name in self.sym:
            dims, scalar, dtype = self.sym[name]
            if all(isinstance(d, int) for d in dims):
                arr = np.array(dims, dtype=dtype)
                return arr.reshape(()) if scalar else arr
        v = self.values.get(name)
        if isinstance(v, Constant):
            return self.mod.const_values[v.name]
        if self.parent is not None and not self._defines_here(name):
            return self.parent.known_array(name)
        return None

    def defines(self, name: str) -> bool:
        """True when `name` is a value of this graph or of an enclosing one."""
        return self._defines_here(name) or (self.parent is not None and self.parent.defines(name))

    def _defines_here(self, name: str) -> bool:
        return (name in self.values or name in self.known or name in self.sym
                or name in self.initializers)

    # -- subgraphs ------------------------------------------------------------------------

    def _from_outer(self, name: str) -> Expr:
        """An outer value read by this subgraph: outer constants are referenced directly
        (constants are module-wide; small known vectors are copied), any other outer value
        becomes a captured parameter."""
        arr = self.parent.known_array(name)
        if arr is not None:
            owner = self.parent
            while not owner._defines_here(name):
                owner = owner.parent
            if name in owner.sym:
                self.known[name] = arr
                return self.value(name)
            return owner.value(name)
        return self.capture(name)

    def capture(self, name: str) -> Expr:
        """Make the outer value `name` a parameter of this subgraph's function."""
        if name not in self.captured:
            outer = self.parent.value(name)
            self.captured[name] = outer
            self.values[name] = self.bb.param(name, type_of(outer))
        return self.values[name]

    def function_name(self, kind: str) -> str:
        """A new global name for the functions of one control-flow node of this graph."""
        while True:
            k = self._subgraphs.get(kind, 0)
            self._subgraphs[kind] = k + 1
            name = f"{self.name}_{kind}{k}"
            if not any(f.startswith(name + "_") for f in self.mod.functions):
                return name

    def subgraph(self, graph: onnx.GraphProto, name: str,
                 formals: Sequence[Type] = ()) -> ImportContext:
        """A context importing `graph` as function `name`, its formal inputs of `formals`."""
        if len(graph.input) != len(formals):
            raise self.node.error(f"subgraph {graph.name!r} has {len(graph.input)} inputs, "
                                  f"expected {len(formals)}")
        _check_tensor_values(self.node, graph)
        sub = ImportContext(graph, self.opsets, parent=self, name=name)
        for vi, t in zip(graph.input, formals):
            sub.values[vi.name] = sub.bb.param(vi.name, t)
        return sub

    def convert_nodes(self) -> None:
        """Convert every node of this context's graph, in order."""
        for i, node_proto in enumerate(self.graph.node):
            domain = normalize_domain(node_proto.domain)
            convert_node(self, OnnxNode.from_proto(node_proto, self.opsets.get(domain, 1), i))

    def outputs(self) -> list[Expr]:
        """The values of the graph's outputs (reading an outer one may capture it)."""
        return [self.value(vi.name) for vi in self.graph.output]

    def function(self, outputs: Sequence[Expr]) -> Function:
        """The finished graph function of this subgraph (not yet added to the module)."""
        return self.bb.finish(outputs, [vi.name for vi in self.graph.output])

    def snapshot(self) -> tuple[set, set]:
        return set(self.mod.const_types), set(self.mod.functions)

    def discard_since(self, snapshot: tuple[set, set]) -> None:
        """Drop the constants and functions a discarded subgraph import added, except the
        constants an enclosing graph refers to."""
        consts, funcs = snapshot
        keep, ctx = set(), self
        while ctx is not None:
            keep.update(v.name for v in ctx.values.values() if isinstance(v, Constant))
            ctx = ctx.parent
        for name in set(self.mod.const_types) - consts - keep:
            del self.mod.const_types[name]
            self.mod.const_values.pop(name, None)
        for name in set(self.mod.functions) - funcs:
            del self.mod.functions[name]

    def shape_value(self, node: OnnxNode, i: int) -> list[Dim] | None:
        """Operand `i` as a list of (possibly symbolic) integers when known, else None."""
        if not node.has_input(i):
            return None
        v = self.sym_value(node.inputs[i])
        return None if v is None or v[1] else v[0]

    def int_vector(self, node: OnnxNode, i: int) -> list[Dim] | None:
        """Operand `i` as a list of (possibly symbolic) ints when known at import time."""
        dims = self.shape_value(node, i)
        if dims is not None:
            return dims
        arr = self.const_value(node, i)
        if arr is None or arr.dtype.kind not in "iu":
            return None
        return [int(v) for v in arr.reshape(-1)]

    def scalar_value(self, node: OnnxNode, i: int):
        """Operand `i` as a Python number (or symbolic int) when known at import time."""
        if not node.has_input(i):
            return None
        sym = self.sym_value(node.inputs[i])
        if sym is not None and len(sym[0]) == 1:
            return sym[0][0]
        arr = self.const_value(node, i)
        if arr is None or arr.size != 1:
            return None
        return arr.reshape(-1)[0].item()

    def sym_value(self, name: str) -> tuple[list[Dim], bool] | None:
        """(dims, is_scalar) of a small integer vector or scalar known at import time."""
        if name in self.sym:
            return self.sym[name][:2]
        arr = self.known_array(name)
        if arr is not None and arr.dtype.kind in "iub" and arr.ndim <= 1 and arr.size <= 64:
            return [int(x) for x in arr.reshape(-1)], arr.ndim == 0
        return None

    def type_of(self, node: OnnxNode, i: int) -> TensorType | None:
        """The type of operand `i` without forcing it into the graph."""
        if not node.has_input(i):
            return None
        name = node.inputs[i]
        if name in self.values:
            t = type_of(self.values[name])
            return t if isinstance(t, TensorType) else None
        if name in self.sym:
            dims, scalar, dtype = self.sym[name]
            return TensorType(() if scalar else (len(dims),), dtype)
        arr = self.const_value(node, i)
        if arr is not None:
            return TensorType(arr.shape, from_numpy(arr.dtype))
        self.value(name)
        return self.type_of(node, i)

    # -- producing values -----------------------------------------------------------------

    def emit(self, op: str, *args: Expr | None, **attrs: Any) -> Expr:
        """Call `op`; evaluated at import time when all operands are constants and small."""
        name = self.node.outputs[0] if self.node and self.node.outputs else "v"
        return emit_folded(self.mod, self.bb, op, *args, name=name, **attrs)

    def set_known(self, name: str, value: np.ndarray) -> None:
        self.known[name] = np.asarray(value)

    def set_sym(self, name: str, dims: Sequence[Dim], scalar: bool = False, dtype: str = "int64") -> None:
        self.sym[name] = ([as_dim(d) for d in dims], scalar, dtype)

    def sym_dtype(self, name: str) -> str:
        return self.sym[name][2]

    def size_var(self, name: str) -> Var:
        if name not in self.size_vars:
            self.size_vars[name] = Var(_identifier(name))
        return self.size_vars[name]


def _check_tensor_values(node: OnnxNode, graph: onnx.GraphProto) -> None:
    """Subgraph inputs and outputs must be tensors, sequences or optionals (or untyped,
    inferred from their uses)."""
    for vi in [*graph.input, *graph.output]:
        kind = vi.type.WhichOneof("value")
        if kind not in (None, "tensor_type", "sequence_type", "optional_type"):
            raise node.error(f"subgraph {graph.name!r} value {vi.name!r} has type "
                             f"{kind.removesuffix('_type')}; tcc supports tensors, sequences and optionals")


def _identifier(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


# ---------------------------------------------------------------------------------------------


def load_model(model_or_path, read: list[str] | None = None) -> onnx.ModelProto:
    """Read an ONNX model from a path or bytes, or pass a ModelProto through. A model read
    from a path may keep tensors in other files beside it (external data): their names,
    relative to its folder, are added to `read`."""
    return _load(model_or_path, read, lift=False)[0]


def _load(model_or_path, read: list[str] | None,
          lift: bool) -> tuple[onnx.ModelProto, dict[int, np.ndarray]]:
    """load_model's model, and with `lift`, the raw_data of its graph's initializers read
    from the file into arrays of their own, by initializer index
    (tcc.frontend.onnx.raw_data): those initializers then have no raw_data in the model."""
    if isinstance(model_or_path, (bytes, bytearray)):
        m = proto.ModelProto()
        try:
            m.ParseFromString(bytes(model_or_path))
        except Exception as e:
            raise FrontendError(f"not a valid ONNX model: {e}") from None
        return m, {}
    if not isinstance(model_or_path, (str, os.PathLike)):
        if proto.is_model(model_or_path):
            return model_or_path, {}
        raise FrontendError(f"expected an ONNX ModelProto, its bytes or a path, got "
                            f"{type(model_or_path).__name__}")
    path = os.fspath(model_or_path)
    why = not_a_file(path)
    if why:
        raise FrontendError(f"{path}: {why}")
    try:
        model, lifted = _read_model(path, lift)
        files = external_data_files(model)
        if files:
            from onnx.external_data_helper import load_external_data_for_model

            # a tensor whose data is read from another file keeps what that file holds
            initializers = model.graph.initializer
            lifted = {i: raw for i, raw in lifted.items()
                      if initializers[i].data_location != proto.TensorProto.EXTERNAL}
            load_external_data_for_model(model, os.path.dirname(path))
        if read is not None:
            read += files
        return model, lifted
    except Exception as e:
        raise FrontendError(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'parse failed'}); check the file is a complete .onnx export") from None


# the file name extensions onnx.load reads as other formats than binary protobuf
_OTHER_FORMATS = frozenset({".txtpb", ".textproto", ".prototxt", ".pbtxt", ".onnxtxt", ".json"})


def _read_model(path: str, lift: bool) -> tuple[onnx.ModelProto, dict[int, np.ndarray]]:
    """The model in the file `path`, as `onnx.load(path, load_external_data=False)` reads it
    (a binary one without importing onnx), and with `lift`, its lifted raw_data (_load)."""
    if os.path.splitext(path)[1] not in _OTHER_FORMATS:
        if lift:
            with open(path, "rb", buffering=0) as f:
                found = raw_data.read_lifted(f)
            if found is not None:
                stripped, lifted = found
                model = proto.ModelProto()
                try:
                    if (model.ParseFromString(stripped) == len(stripped)
                            and max(lifted, default=-1) < len(model.graph.initializer)):
                        return model, lifted
                except Exception:  # noqa: S110 (read whole below)
                    pass
        with open(path, "rb") as f:
            data = f.read()
        model = proto.ModelProto()
        try:
            if model.ParseFromString(data) == len(data):
                return model, {}
        except Exception:  # noqa: S110 (onnx.load says what is wrong)
            pass
    import onnx

    return onnx.load(path, load_external_data=False), {}


def external_data_files(model: onnx.ModelProto) -> list[str]:
    """The files (relative to the model's folder) its tensors keep their data in, in order
    of first use: initializers, sparse ones, and tensors in attributes, subgraphs included."""
    files: dict[str, None] = {}

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_location == proto.TensorProto.EXTERNAL:
            files.update(dict.fromkeys(e.value for e in t.external_data if e.key == "location"))

    def nodes(ns) -> None:
        for node in ns:
            for a in node.attribute:
                if a.HasField("t"):
                    tensor(a.t)
                for t in a.tensors:
                    tensor(t)
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    graph(g)

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for s in g.sparse_initializer:
            tensor(s.values)
            tensor(s.indices)
        nodes(g.node)

    graph(model.graph)
    for f in model.functions:
        nodes(f.node)
    return list(files)


def check_structure(model: onnx.ModelProto) -> None:
    """Reject models without a usable graph before looking at any op."""
    g = model.graph
    if not model.HasField("graph") or not g.output:
        raise FrontendError("the model has no graph outputs (empty or truncated file?); check the export")
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    for i, node in enumerate(g.node):
        for out in node.output:
            if out and out in defined:
                raise FrontendError(f"value {out!r} is defined twice (again by node {node.name or i!r}); the graph is not in SSA form")
            defined.add(out)
    for vi in g.output:
        if vi.name not in defined:
            raise FrontendError(f"graph output {vi.name!r} is produced by no node, input or initializer")


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    if "" not in opsets:
        opsets[""] = 1 if not model.opset_import else max(opsets.values())
    return opsets


def find_unsupported(model: onnx.ModelProto) -> list[tuple[str, str, int, list[str]]]:
    """Every op type the importer cannot convert: (domain, op_type, opset, node names)."""
    opsets = model_opsets(model)
    found: dict[tuple[str, str], list[str]] = {}
    for i, node in enumerate(_all_nodes(model.graph)):
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain, 1)
        conv = CONVERTERS.get((domain, node.op_type))
        if (conv is None or conv.impl_for(opset) is None) and not functions.has_function(
            node.op_type, domain, opset
        ):
            found.setdefault((domain, node.op_type), []).append(node.name or f"{node.op_type}_{i}")
    return [(d, op, opsets.get(d, 1), names) for (d, op), names in found.items()]


# Ops whose subgraphs the importer converts node by node (into functions of the module). Other
# ops' graph attributes are interpreted by their converters, which report what they reject.
CONTROL_FLOW_OPS = ("If", "Loop", "Scan")


def _all_nodes(graph: onnx.GraphProto):
    """The nodes of `graph` and, after each control-flow node, those of its subgraphs."""
    for node in graph.node:
        yield node
        if normalize_domain(node.domain) == "" and node.op_type in CONTROL_FLOW_OPS:
            for a in node.attribute:
                if a.HasField("g"):
                    yield from _all_nodes(a.g)


def format_unsupported(unsupported) -> str:
    parts = []
    for domain, op, opset, names in unsupported:
        full = f"{domain}.{op}" if domain else op
        parts.append(f"{full} (opset {opset}, first node {names[0]!r})")
    return f"unsupported ONNX op{'s' if len(parts) > 1 else ''}: " + ", ".join(parts)


def graph_input_type(ctx: ImportContext, vi: onnx.ValueInfoProto) -> Type:
    return value_type(ctx, vi.name, vi.type)


def value_type(ctx: ImportContext, name: str, tt: onnx.TypeProto) -> Type:
    """The tcc type of graph input `name` declared as `tt`: a tensor, a sequence of tensors,
    or an optional of either."""
    kind = tt.WhichOneof("value")
    if kind == "optional_type":
        elem = value_type(ctx, name, tt.optional_type.elem_type)
        if not isinstance(elem, (TensorType, SequenceType)):
            raise FrontendError(f"graph input {name!r}: an optional holds a tensor or a sequence")
        return OptionalType(elem)
    if kind == "sequence_type":
        elem = tt.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise FrontendError(f"graph input {name!r}: only sequences of tensors are supported, "
                                f"got a sequence of {elem.WhichOneof('value')}")
        dtype = onnx_dtype(elem.tensor_type.elem_type)
        if not elem.tensor_type.HasField("shape"):
            return SequenceType(dtype, None)
        return SequenceType(dtype, tuple(
            int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None
            for d in elem.tensor_type.shape.dim))
    if kind != "tensor_type":
        raise FrontendError(f"graph input {name!r}: only tensor, sequence and optional inputs "
                            f"are supported, got {kind}")
    dtype = onnx_dtype(tt.tensor_type.elem_type)
    if not tt.tensor_type.HasField("shape"):
        raise FrontendError(f"graph input {name!r} has no shape (not even a rank); re-export the model with input shapes")
    dims: list[Dim] = []
    for k, d in enumerate(tt.tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(ctx.size_var(d.dim_param))
        else:
            dims.append(ctx.size_var(f"{name}_dim{k}"))
    return TensorType(tuple(dims), dtype)


def from_onnx(model_or_path, name: str = "main", read: list[str] | None = None) -> IRModule:
    """Import an ONNX model (ModelProto, bytes or path) as an IRModule with function `name`;
    the files of its external data are added to `read` (load_model)."""
    model, lifted = _load(model_or_path, read, lift=True)
    try:
        check_structure(model)
    except FrontendError as e:
        if isinstance(model_or_path, (str, os.PathLike)):
            raise FrontendError(f"{os.fspath(model_or_path)}: {e}") from None
        raise
    if model.functions:
        from onnx import inliner

        for i, raw in lifted.items():  # the inliner reads the model whole
            model.graph.initializer[i].raw_data = bytes(raw)
        lifted = {}
        model = inliner.inline_local_functions(model)
    unsupported = find_unsupported(model)
    if unsupported:
        raise FrontendError(format_unsupported(unsupported) + "; run `tcc check` for the full report")
    graph = model.graph
    ctx = ImportContext(graph, model_opsets(model), name=name, lifted=lifted)
    for vi in graph.input:
        if vi.name in ctx.initializers:
            continue
        ctx.values[vi.name] = ctx.bb.param(vi.name, graph_input_type(ctx, vi))
    ctx.convert_nodes()
    outputs = []
    for vi in graph.output:
        v = ctx.value(vi.name)
        if any(v is p for p in ctx.bb.params) or isinstance(v, Constant):
            v = ctx.bb.emit("identity", v, name=vi.name)
        outputs.append(v)
    ctx.mod.functions[name] = ctx.bb.finish(outputs, [vi.name for vi in graph.output])
    ctx.mod.prune_constants()  # values folded away during import (e.g. shape arithmetic)
    return ctx.mod


def convert_node(ctx: ImportContext, node: OnnxNode) -> None:
    ctx.node = node
    if symbolic.try_propagate(ctx, node):
        return
    conv = CONVERTERS.get((node.domain, node.op_type))
    impl = conv.impl_for(node.opset) if conv is not None else None
    if impl is None:
        _convert_by_function_body(ctx, node)
        return
    try:
        result = impl(ctx, node)
    except FrontendError:
        raise
    except TccError as e:
        raise FrontendError(f"{node.where()}: {e}") from None
    except (InternalError, Exception) as e:  # a converter bug: keep the node in the message
        raise InternalError(f"{node.where()}: {type(e).__name__}: {e}") from e
    results = result if isinstance(result, (list, tuple)) else [result]
    if len(results) < len([o for o in node.outputs if o]):
        raise InternalError(f"{node.where()}: converter returned {len(results)} outputs for {len(node.outputs)}")
    for out_name, value in zip(node.outputs, results):
        if out_name and value is not None:
            ctx.values[out_name] = value


def _convert_by_function_body(ctx: ImportContext, node: OnnxNode) -> None:
    """Convert an op that has no converter through its ONNX function body."""
    input_types = [_type_proto(_operand_type(ctx, node, i)) for i in range(len(node.inputs))]
    body = functions.function_body(node.proto, node.opset, input_types)
    full = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
    if body is None:
        raise FrontendError(f"unsupported ONNX op: {full} (opset {node.opset}, node {node.name!r}) has neither a converter nor a function body for these inputs")
    nodes, body_opsets = functions.expand(node.proto, node.opset, body)
    for i, node_proto in enumerate(nodes):
        domain = normalize_domain(node_proto.domain)
        opset = body_opsets.get(domain, ctx.opsets.get(domain, 1))
        sub = OnnxNode.from_proto(node_proto, opset, i)
        if (domain, sub.op_type) not in CONVERTERS and not functions.has_function(sub.op_type, domain, opset):
            raise FrontendError(f"unsupported ONNX op: {sub.op_type} (opset {opset}) in the function body of {node.where()}")
        convert_node(ctx, sub)
    ctx.node = node


def _operand_type(ctx: ImportContext, node: OnnxNode, i: int) -> Type | None:
    """The type of operand `i`: a sequence or optional as it is, a tensor without forcing it
    into the graph."""
    if node.has_input(i) and node.inputs[i] in ctx.values:
        t = type_of(ctx.values[node.inputs[i]])
        if isinstance(t, (SequenceType, OptionalType)):
            return t
    return ctx.type_of(node, i)


def _type_proto(t: Type | None) -> onnx.TypeProto | None:
    import onnx  # for function bodies, which import onnx anyway

    if t is None:
        return None
    if isinstance(t, OptionalType):
        elem = _type_proto(t.elem)
        return None if elem is None else onnx.helper.make_optional_type_proto(elem)
    if isinstance(t, SequenceType):
        elem = _type_proto(TensorType((), t.dtype))
        if elem is None:
            return None
        if t.shape is None:
            elem.tensor_type.ClearField("shape")
        else:
            elem = onnx.helper.make_tensor_type_proto(
                elem.tensor_type.elem_type, [d if d is not None else "?" for d in t.shape])
        return onnx.helper.make_sequence_type_proto(elem)
    if not isinstance(t, TensorType):
        return None
    elem = proto.element_type(t.dtype)
    if elem is None:
        return None
    dims = [d if isinstance(d, int) else str(d) for d in t.shape]
    return onnx.helper.make_tensor_type_proto(elem, dims)
