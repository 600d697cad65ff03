"""A `torch.export.ExportedProgram` -> IRModule with one graph function, `main`
(`from_graph`: the same for a core ATen FX graph, as torch.compile's backend gets one).

The program is first brought to the core ATen op set (`run_decompositions`), so that each
converter handles one small, stable op (KEPT_WHOLE lists the exceptions). Parameters,
buffers and lifted constants become named module constants; the user inputs become the
function's parameters, named as in the program's signature. Each symbol of a dynamic dimension becomes one size variable, named
after the first input dimension it sizes (`x_dim0`), and every size torch computed from
those symbols is the same expression of the variables (tcc.frontend.torch.symbolic), so a
`view` after shape arithmetic is a symbolic reshape.

torch records the type of every value it computed (`node.meta["val"]`); each converted
value is checked against it, so a converter that computes another shape fails here with
the node's name, not later; a dtype that differs is cast to torch's.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from tcc.frontend.fold import emit_folded
from tcc.frontend.torch.base import CONVERTERS, TorchNode, source_line, target_name
from tcc.frontend.torch.symbolic import to_condition, to_dim
from tcc.infile import not_a_file
from tcc.ir import expr as E
from tcc.ir import facts
from tcc.ir.builder import FunctionBuilder
from tcc.ir.dtype import DTYPES
from tcc.ir.errors import FrontendError, InternalError, TccError
from tcc.ir.expr import Dim, PrimExpr, Var, prove_equal
from tcc.ir.graph import Call, Constant, Expr, ShapeExpr, ShapeType, TensorType, type_of
from tcc.ir.module import IRModule

INSTALL_HINT = "install it with `pip install 'tcc[torch]'`"

# Nodes that only check or annotate what torch already knows (metadata checks, the ranges
# of values read from tensors, which `_assert_scalar`s check): they compute nothing the
# graph uses.
IGNORED = frozenset({
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
    "aten._assert_async.default",
})


# Scalar nodes converted here rather than by a converter of ops: a tensor's value read as a
# size (`.item()`), and a check of sizes the program asserts.
ITEM, ASSERT = "aten._local_scalar_dense.default", "aten._assert_scalar.default"


# Ops tcc converts whole instead of from their decomposition: torch's decomposition of
# scaled dot-product attention fails to retrace some exports (GPT-2's views of its output).
KEPT_WHOLE = ("aten.scaled_dot_product_attention.default",)


def overload(torch, name: str):
    """The OpOverload a registry name ("aten.add.Tensor") names."""
    _, op, variant = name.split(".")
    return getattr(getattr(torch.ops.aten, op), variant)


def first_line(e: BaseException) -> str:
    """An exception's message as one line (torch's run over many)."""
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def require_torch():
    """The torch module, or a FrontendError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise FrontendError(f"reading PyTorch programs needs PyTorch; {INSTALL_HINT}") from None
    return torch


def torch_dtype(dtype) -> str:
    """The tcc dtype of a torch dtype (FrontendError when tcc has none)."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES or name.startswith("complex"):
        raise FrontendError(f"unsupported torch dtype {name}")
    return name


def to_numpy(t) -> np.ndarray:
    """A torch tensor's values as a numpy array (bfloat16 widened to float32, which is how
    tcc holds bfloat16 constants)."""
    torch = require_torch()
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return np.ascontiguousarray(t.numpy())


class ImportContext:
    """State of one program import: the builder, the values of the nodes converted so far,
    and the size variable of each symbol."""

    def __init__(self):
        self.mod = IRModule()
        self.bb = FunctionBuilder()
        self.values: dict[Any, Any] = {}  # fx node -> converted value
        self.size_vars: dict[Any, Var] = {}  # sympy symbol -> size variable
        self.symbol_names: dict[Any, str] = {}  # sympy symbol -> preferred variable name
        self.node: TorchNode | None = None

    # -- sizes ----------------------------------------------------------------------------

    def var_of(self, symbol) -> Var:
        if symbol not in self.size_vars:
            name = self.symbol_names.get(symbol, str(symbol))
            self.size_vars[symbol] = Var(re.sub(r"\W", "_", name))
        return self.size_vars[symbol]

    def dim(self, size) -> Dim:
        """A tcc size from a torch size: an int, a SymInt, or a sympy expression."""
        if isinstance(size, int):
            return size
        return self._from_sympy(size, to_dim)

    def condition(self, value) -> PrimExpr | bool:
        """A tcc boolean from a torch SymBool (a condition on sizes)."""
        return self._from_sympy(value, to_condition)

    def _from_sympy(self, value, convert):
        """`convert` (to_dim, to_condition) of the sympy expression behind a torch symbolic
        value, its error naming the node being converted."""
        expr = getattr(getattr(value, "node", None), "expr", value)
        try:
            return convert(expr, self.var_of)
        except FrontendError as e:
            raise self.node.error(str(e)) if self.node else e from None

    def shape(self, fake) -> tuple[Dim, ...]:
        return tuple(self.dim(d) for d in fake.shape)

    def out_shape(self, node: TorchNode) -> tuple[Dim, ...]:
        return self.shape(node.val)

    def out_dtype(self, node: TorchNode) -> str:
        return torch_dtype(node.val.dtype)

    # -- values ---------------------------------------------------------------------------

    def emit(self, op: str, *args: Expr | None, **attrs: Any) -> Expr:
        """Call `op`; evaluated at import time when all operands are constants and small."""
        name = self.node.name if self.node else "v"
        return emit_folded(self.mod, self.bb, op, *args, name=name, **attrs)

    def constant(self, value, dtype: str | None = None, hint: str | None = None) -> Constant:
        value = np.asarray(value)
        if dtype is not None and dtype != "bfloat16":
            value = value.astype(dtype)
        hint = hint or (f"{self.node.name}_c" if self.node else "c")
        return self.mod.add_constant(self.mod.unique_constant_name(hint), value,
                                     dtype if dtype == "bfloat16" else None)

    def tensor(self, value, dtype: str | None = None) -> Expr:
        """`value` (a graph value, a Python number or a size) as a graph value, cast to
        `dtype` when given."""
        if isinstance(value, (bool, int, float)):
            kind = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"
            want = dtype or kind
            return self.constant(np.array(value, dtype="float32" if want == "bfloat16" else want), want)
        if isinstance(value, PrimExpr):
            v = self.emit("shape_to_tensor", dims=[value], scalar=True, dtype="int64")
        elif isinstance(value, Expr):
            v = value
        else:
            raise self.node.error(f"expected a tensor operand, got {type(value).__name__}")
        return self.cast(v, dtype) if dtype is not None else v

    def cast(self, v: Expr, dtype: str) -> Expr:
        t = type_of(v)
        if isinstance(t, TensorType) and t.dtype == dtype:
            return v
        return self.emit("cast", v, dtype=dtype)

    def dtype_of(self, v: Expr) -> str:
        return type_of(v).dtype

    def ndim_of(self, v: Expr) -> int:
        return type_of(v).ndim

    def shape_of(self, v: Expr) -> tuple[Dim, ...]:
        return type_of(v).shape


# ---------------------------------------------------------------------------------------------


def load_program(path):
    """Read a program saved by `torch.export.save` (.pt2)."""
    torch = require_torch()
    path = os.fspath(path)
    why = not_a_file(path)
    if why:
        raise FrontendError(f"{path}: {why}")
    try:
        return torch.export.load(path)
    except Exception as e:
        raise FrontendError(f"{path}: not a program saved by torch.export.save "
                            f"({type(e).__name__}: {first_line(e)}); save it with "
                            "torch.export.save(ep, path)") from None


def decomposed(ep):
    """The program with its ops decomposed to the core ATen op set, except the ops tcc
    keeps whole (KEPT_WHOLE)."""
    torch = require_torch()
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        table.pop(overload(torch, name), None)
    try:
        return ep.run_decompositions(table)
    except Exception as e:
        raise FrontendError(f"the program's ops could not be decomposed to core ATen "
                            f"({type(e).__name__}: {first_line(e)})") from None


def _as_program(program_or_path):
    torch = require_torch()
    if isinstance(program_or_path, torch.export.ExportedProgram):
        return program_or_path
    if isinstance(program_or_path, (str, os.PathLike)):
        return load_program(program_or_path)
    raise FrontendError(f"expected a torch.export.ExportedProgram or a .pt2 path, got "
                        f"{type(program_or_path).__name__}")


def find_unsupported(program) -> list[tuple[str, list[str]]]:
    """Every op of the (decomposed) program, or FX graph, without a converter:
    (target, [where, ...])."""
    found: dict[str, list[str]] = {}
    graph = getattr(program, "graph", program)
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        name = target_name(n.target)
        if (name in CONVERTERS or name in IGNORED or name == ASSERT
                or _is_symbolic_scalar(n.meta.get("val"))):
            continue
        line = source_line(n)
        found.setdefault(name, []).append(f"{n.name}" + (f" at {line}" if line else ""))
    return sorted(found.items())


def format_unsupported(unsupported) -> str:
    parts = [f"{op} ({len(where)}x, first {where[0]})" for op, where in unsupported]
    return f"unsupported ATen op{'s' if len(parts) > 1 else ''}: " + "; ".join(parts)


def from_exported_program(program_or_path, name: str = "main") -> IRModule:
    """Import a `torch.export.ExportedProgram` (or a .pt2 file) as an IRModule with the
    graph function `name`."""
    ep = decomposed(_as_program(program_or_path))
    unsupported = find_unsupported(ep)
    if unsupported:
        raise FrontendError(format_unsupported(unsupported))
    ctx = ImportContext()
    _bind_inputs(ctx, ep)
    ranges = _check_ranges(ctx, _user_inputs(ep), ep.range_constraints.get)
    with facts.assuming(ranges):
        _convert_calls(ctx, ep.graph)
        outputs, names = _outputs(ctx, ep)
        return _finished(ctx, name, outputs, names)


def from_graph(graph, constants: dict, name: str = "main") -> IRModule:
    """Import a core ATen FX graph (the forward graph AOT autograd gives a torch.compile
    backend) as an IRModule with the graph function `name`. A placeholder named in
    `constants` (node name -> tensor) becomes a module constant; one that stands for a size
    (a SymInt) becomes that size; every other is a parameter of the function. The outputs
    are named output, output_1, ..."""
    require_torch()
    unsupported = find_unsupported(graph)
    if unsupported:
        raise FrontendError(format_unsupported(unsupported))
    ctx = ImportContext()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    inputs = [n for n in placeholders if n.name not in constants
              and not _is_symbolic_scalar(n.meta.get("val"))]
    named = [(n.name, n.meta.get("val")) for n in inputs]
    _name_symbols(ctx, named)
    for n in placeholders:
        if n.name in constants:
            ctx.values[n] = _constant(ctx, n.name, constants[n.name])
        elif _is_symbolic_scalar(n.meta.get("val")):
            ctx.values[n] = ctx.dim(n.meta["val"])
        else:
            ctx.values[n] = _tensor_param(ctx, n)
    with facts.assuming(_check_ranges(ctx, named, _guarded_range(named), GUARDED_FOR)):
        _convert_calls(ctx, graph)
        out_node = next(n for n in graph.nodes if n.op == "output")
        results = out_node.args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        outputs = [_output_value(ctx, r) for r in results]
        names = ["output" if i == 0 else f"output_{i}" for i in range(len(outputs))]
        return _finished(ctx, name, outputs, names)


def _guarded_range(named):
    """`range_of` for _check_ranges from the shape environment of the fake inputs: the
    range each size lies in when Dynamo's guards pass (which is when the graph runs)."""
    for _, fake in named:
        for d in getattr(fake, "shape", ()):
            env = getattr(getattr(d, "node", None), "shape_env", None)
            if env is not None:
                return env.var_to_range.get
    return lambda symbol: None


def _convert_calls(ctx: ImportContext, graph) -> None:
    for n in graph.nodes:
        if n.op == "call_function":
            _convert(ctx, n)
    ctx.node = None


def _finished(ctx: ImportContext, name: str, outputs, names) -> IRModule:
    ctx.mod.functions[name] = ctx.bb.finish(outputs, names)
    ctx.mod.prune_constants()
    return ctx.mod


def _name_symbols(ctx: ImportContext, inputs) -> None:
    """Name each symbol after the first input dimension it sizes: (input name, fake)."""
    for input_name, fake in inputs:
        for k, d in enumerate(getattr(fake, "shape", ())):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                ctx.symbol_names.setdefault(expr, f"{input_name}_dim{k}")


def _tensor_param(ctx: ImportContext, node) -> Expr:
    fake = node.meta["val"]
    shape = ctx.shape(fake)
    for k, d in enumerate(shape):
        if isinstance(d, PrimExpr) and not isinstance(d, Var):
            raise FrontendError(f"input {node.name!r} dimension {k} is sized {d}, an "
                                "expression of another input's size; give it a Dim of its own")
    return ctx.bb.param(node.name, TensorType(shape, torch_dtype(fake.dtype)))


def _constant(ctx: ImportContext, name: str, tensor) -> Constant:
    dtype = torch_dtype(tensor.dtype)
    return ctx.mod.add_constant(ctx.mod.unique_constant_name(name), to_numpy(tensor),
                                dtype if dtype == "bfloat16" else None)


def _bind_inputs(ctx: ImportContext, ep) -> None:
    """Parameters, buffers and constants become module constants; user inputs parameters."""
    from torch.export.graph_signature import InputKind, TensorArgument

    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    _name_symbols(ctx, [(s.arg.name, placeholders[s.arg.name].meta.get("val"))
                        for s in user if isinstance(s.arg, TensorArgument)])
    for spec in ep.graph_signature.input_specs:
        node = placeholders.get(getattr(spec.arg, "name", None))
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(spec.arg, TensorArgument):
                if node is not None and hasattr(spec.arg, "value"):
                    ctx.values[node] = spec.arg.value
                    continue
                raise FrontendError(f"program input {spec.arg!r}: only tensor inputs are supported")
            ctx.values[node] = _tensor_param(ctx, node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = (ep.state_dict.get(spec.target) if spec.target in ep.state_dict
                      else ep.constants.get(spec.target))
            if tensor is None:
                raise FrontendError(f"program input {spec.arg.name!r}: no value for {spec.target!r}")
            ctx.values[node] = _constant(ctx, spec.target, tensor)
        else:
            raise FrontendError(f"program input {spec.arg.name!r} is a {spec.kind.name.lower()}, "
                                "which tcc does not support")


EXPORTED_FOR = ("the range the program was exported for; export it again with a Dim that covers "
                "this size")
GUARDED_FOR = "the range torch.compile's guards compiled this graph for"


def _check_ranges(ctx: ImportContext, inputs, range_of, why: str = EXPORTED_FOR) -> dict:
    """The range torch was given or found for each dynamic input size (torch.export's
    `Dim(min=, max=)`, the ranges Dynamo's guards keep), checked when the pack runs: a size
    outside it stops the run with one line, as the program run by torch refuses it,
    instead of running code traced for other sizes. Returns the ranges (size variable ->
    (least, most or None)), which hold for everything after the check (tcc.ir.facts).
    `inputs` are (input name, fake tensor) pairs; `range_of(symbol)` is torch's range of a
    symbol (lower and upper bound), or None; `why` ends each check's message."""
    checks, ranges = [], {}
    for input_name, fake in inputs:
        for k, d in enumerate(getattr(fake, "shape", ())):
            symbol = getattr(getattr(d, "node", None), "expr", None)
            if symbol is None or not getattr(symbol, "is_Symbol", False):
                continue
            bounds = range_of(symbol)
            var = ctx.var_of(symbol)
            if bounds is None or var in ranges:
                continue
            low, high = _finite(bounds.lower), _finite(bounds.upper)
            low = max(low or 0, 0)
            if low == 0 and high is None:
                continue
            ranges[var] = (low, high)
            conds = facts.conditions(var, (low, high))
            span = f"at least {low}" if high is None else f"from {low} to {high}"
            checks += [(cond, f"input {input_name!r} dimension {k} must be {span}, {why}")
                       for cond in conds]  # one bound each
    if checks:
        ctx.bb.bind(ShapeExpr((), tuple(checks)), ShapeType(0, ()), name="input_ranges")
    return ranges


def _user_inputs(ep) -> list:
    """(name, fake tensor) of each tensor the caller of the program passes."""
    from torch.export.graph_signature import InputKind, TensorArgument

    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [(spec.arg.name, placeholders[spec.arg.name].meta.get("val"))
            for spec in ep.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, TensorArgument)]


def _finite(bound) -> int | None:
    """A range bound of torch's (an int or a sympy number) as an int; None for an infinite
    one (sympy's oo, torch's int_oo)."""
    if getattr(bound, "is_finite", True) is False:
        return None
    try:
        return int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _outputs(ctx: ImportContext, ep) -> tuple[list[Expr], list[str]]:
    from torch.export.graph_signature import OutputKind

    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    results = list(out_node.args[0])
    specs = ep.graph_signature.output_specs
    mutated = [s.target for s in specs if s.kind != OutputKind.USER_OUTPUT]
    if mutated:
        raise FrontendError(
            f"the program writes to {', '.join(map(str, mutated))}: tcc compiles programs "
            "without state; export the model in eval mode (model.eval()) without in-place "
            "updates of its buffers or inputs")
    values = [_output_value(ctx, r) for r in results]
    return values, _output_names(ep, len(values))


def _output_value(ctx: ImportContext, r) -> Expr:
    v = ctx.values[r] if hasattr(r, "op") else r
    if not isinstance(v, Expr):
        v = ctx.tensor(v)
    if isinstance(v, Constant) or any(v is p for p in ctx.bb.params):
        v = ctx.bb.emit("identity", v, name="out")
    return v


def _output_names(ep, n: int) -> list[str]:
    """The outputs' names from the structure the model returns: a dict's keys
    ("last_hidden_state"), else output, output_1, ..."""
    import torch.utils._pytree as pytree

    try:
        tree = pytree.tree_unflatten(list(range(n)), ep.call_spec.out_spec)
        paths = [p for p, _ in pytree.tree_flatten_with_path(tree)[0]]
    except Exception:
        paths = [()] * n
    names: list[str] = []
    for i, path in enumerate(paths):
        keys = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]
        base = "_".join(k for k in keys if k and not k.isdigit()) or ("output" if i == 0 else f"output_{i}")
        name, k = base, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def _convert(ctx: ImportContext, fx_node) -> None:
    name = target_name(fx_node.target)
    if name in IGNORED:
        return
    node = TorchNode(fx_node, _resolve(ctx, fx_node.args), _resolve(ctx, fx_node.kwargs))
    ctx.node = node
    val = node.val
    if name == ITEM:
        ctx.values[fx_node] = _item(ctx, node)
        return
    if name == ASSERT:
        _assert(ctx, node)
        return
    if _is_symbolic_scalar(val):  # size arithmetic: torch already knows the expression
        ctx.values[fx_node] = (ctx.dim(val) if _is_int(val) else ctx.condition(val)
                               if type(val).__name__ == "SymBool" else _sym_number(val))
        return
    if _is_empty(val):  # no elements to compute: no kernel either
        ctx.values[fx_node] = ctx.emit("full", shape=list(ctx.shape(val)), value=0,
                                       dtype=torch_dtype(val.dtype))
        return
    try:
        result = CONVERTERS[name](ctx, node)
    except FrontendError:
        raise
    except TccError as e:
        raise FrontendError(f"{node.where()}: {e}") from None
    except Exception as e:  # a converter bug: keep the node in the message
        raise InternalError(f"{node.where()}: {type(e).__name__}: {e}") from e
    ctx.values[fx_node] = _checked(ctx, node, result)


def _item(ctx: ImportContext, node: TorchNode):
    """`.item()` of an integer tensor whose value the program uses as a size (torch's
    unbacked symbol, `u0`): the VM reads it into that size variable when the program runs
    (`tensor_to_shape`), and the shapes torch computed from it use the variable."""
    import sympy

    val = node.val
    if not _is_int(val):
        raise node.error(f"a {type(val).__name__} read from a tensor (.item()) is not "
                         "supported; tcc reads integer values as sizes only")
    expr = val.node.expr
    if not isinstance(expr, sympy.Symbol):  # torch knows it from the sizes
        return ctx.dim(val)
    (t,) = node.args[:1]
    if not isinstance(t, Expr) or not ctx.dtype_of(t).startswith(("int", "uint")):
        raise node.error("`.item()` of a non-integer tensor used as a size is not supported")
    source = node.fx.args[0]
    if expr not in ctx.size_vars and expr not in ctx.symbol_names and hasattr(source, "name"):
        ctx.symbol_names[expr] = f"{source.name}_item"  # read from tensor `n`: n_item
    var = ctx.var_of(expr)
    ctx.bb.bind(Call("tensor_to_shape", (t,), {}), ShapeType(1, (var,)), name=var.name)
    return var


def _assert(ctx: ImportContext, node: TorchNode) -> None:
    """`torch._check(...)` on sizes, kept as a check the pack makes when it runs (a value
    read from a tensor outside the range the program was traced for stops the run with
    one line) instead of dropped."""
    cond = node.args[0]
    message = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], str) else (
        f"runtime assertion {node.name} failed")
    if isinstance(cond, E.IntImm):
        cond = bool(cond.value)
    if isinstance(cond, (bool, int)):  # settled when the program was imported
        if not cond:
            raise node.error(f"the program asserts what never holds: {message}")
        return
    if not isinstance(cond, PrimExpr):
        raise node.error(f"an assertion on a {type(cond).__name__} is not supported")
    ctx.bb.bind(ShapeExpr((), ((cond, f"the program's check {cond} failed: {message}"),)),
                ShapeType(0, ()), name="check")


def _resolve(ctx: ImportContext, a):
    if hasattr(a, "op") and hasattr(a, "meta"):  # an fx node
        return ctx.values[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_resolve(ctx, x) for x in a)
    if isinstance(a, dict):
        return {k: _resolve(ctx, v) for k, v in a.items()}
    return a


def _is_symbolic_scalar(val) -> bool:
    return type(val).__name__ in ("SymInt", "SymFloat", "SymBool")


def _is_empty(val) -> bool:
    """A tensor torch knows has no elements (a static size of 0)."""
    shape = getattr(val, "shape", None)
    return (type(val).__name__ in ("FakeTensor", "Tensor") and shape is not None
            and any(isinstance(d, int) and d == 0 for d in shape))


def _is_int(val) -> bool:
    return type(val).__name__ == "SymInt"


def _sym_number(val):
    raise FrontendError(f"symbolic {type(val).__name__} {val} values are not supported")


def _checked(ctx: ImportContext, node: TorchNode, result):
    """`result` checked against torch's recorded type: a shape mismatch is a converter bug,
    a dtype mismatch is cast to torch's dtype."""
    torch = require_torch()
    val = node.val
    if isinstance(val, torch.Tensor) and isinstance(result, Expr):
        return _checked_tensor(ctx, node, result, val)
    if isinstance(val, (list, tuple)) and isinstance(result, (list, tuple)):
        return [r if r is None or not isinstance(v, torch.Tensor) or not isinstance(r, Expr)
                else _checked_tensor(ctx, node, r, v) for r, v in zip(result, val)]
    return result


def _checked_tensor(ctx: ImportContext, node: TorchNode, v: Expr, fake) -> Expr:
    t = type_of(v)
    want = ctx.shape(fake)
    if not isinstance(t, TensorType) or len(t.shape) != len(want) or not all(
            prove_equal(a, b) for a, b in zip(t.shape, want)):
        raise InternalError(f"{node.where()}: converted to {t}, but torch computes shape "
                            f"({', '.join(map(str, want))})")
    return ctx.cast(v, torch_dtype(fake.dtype))
