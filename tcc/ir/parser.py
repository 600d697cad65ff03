"""The IR text parser: rebuilds an IRModule from the text `tcc.ir.printer` writes.

The text is Python syntax, read with Python's `ast` module and never evaluated. Every node
is built directly (`BinOp("add", a, b, dtype)`, not `a + b`), so nothing is simplified and
`parse_module(print_module(m))` is structurally equal to `m`. Each op call's annotated type
is checked against the op registry's inference. Every problem with the text is a ParseError
whose one-line message starts with `file:line:col:`; docs/ir-text.md describes the syntax.
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any

from tcc.ir import expr as E
from tcc.ir import facts
from tcc.ir import graph as G
from tcc.ir import tir as T
from tcc.ir.builder import infer_call
from tcc.ir.dtype import DTYPES, INDEX_DTYPE, is_float
from tcc.ir.errors import ParseError, TccError
from tcc.ir.module import IRModule
from tcc.ir.printer import CONTROL_FLOW_SYNTAX, NON_FINITE, call_default_dtype, format_type

_AST_BIN = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
    ast.FloorDiv: "floordiv", ast.Mod: "floormod",
}  # fmt: skip
_AST_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_ARITY = {"min": 2, "max": 2, "select": 3, "cast": 2}  # expression calls besides intrinsics
_CONTROL_FLOW = {name: (cls, positional, fields)
                 for cls, (name, positional, fields) in CONTROL_FLOW_SYNTAX.items()}
_FOR_KINDS = {k.value: k for k in T.ForKind}
MAX_NESTING = 256  # levels of one expression (a + b + ... counts one level per +)
_ITER_KINDS = {k.value: k for k in T.IterKind}


class Scope:
    """Names visible at one point of a function; a child scope sees its parents' names."""

    def __init__(self, parent: Scope | None = None):
        self.parent = parent
        self.names: dict[str, object] = {}

    def lookup(self, name: str):
        s: Scope | None = self
        while s is not None and name not in s.names:
            s = s.parent
        return None if s is None else s.names[name]

    def child(self) -> Scope:
        return Scope(self)


def _call_name(node: ast.AST | None) -> str | None:
    """`f` for a call `f(...)`, `a.f` for `a.f(...)`, else None."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return None


def _number(node: ast.AST) -> int | float | None:
    """The value of a number literal (`3`, `-0.5`, `True`), or None when it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)):
        return -node.operand.value
    return None


def _int(node: ast.AST) -> int | None:
    v = _number(node)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _index_nodes(node: ast.Subscript) -> list[ast.expr]:
    s = node.slice
    return list(s.elts) if isinstance(s, ast.Tuple) else [s]


def _kind(obj) -> str:
    kinds = {G.Var: "graph value", T.Buffer: "buffer", E.Var: "scalar variable"}
    return kinds.get(type(obj), type(obj).__name__)


class Parser:
    """Reads one module's text; methods take the AST node they report errors at."""

    def __init__(self, filename: str):
        self.filename = filename
        self.mod = IRModule()
        self.size_vars: set[int] = set()  # ids of the current function's size variables
        # Loop variables and local buffers of the current function by name: a name bound
        # again in a later sibling scope is the same object, as it was when printed.
        self.bound: dict[str, object] = {}
        self.tir_calls: list[tuple[ast.AST, str]] = []
        # Control-flow bindings, typed once every function they call is read:
        # (call, annotation, declared type, node, size variables of the enclosing function).
        self.control_flow: list[tuple[ast.Call, ast.AST, G.Type, Any, set[int]]] = []

    def error(self, node: ast.AST, msg: str) -> ParseError:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        return ParseError(f"{self.filename}:{line}:{col}: {msg}")

    def parse(self, text: str, mode: str = "exec") -> ast.AST:
        try:
            tree = ast.parse(text, self.filename, mode=mode)
        except SyntaxError as e:
            where = f"{self.filename}:{e.lineno or 1}:{e.offset or 1}"
            raise ParseError(f"{where}: invalid Python syntax: {e.msg}") from None
        except (RecursionError, MemoryError):
            raise ParseError(f"{self.filename}: the text nests deeper than Python's parser allows; "
                             f"keep expressions under {MAX_NESTING} levels deep") from None
        self.check_nesting(tree)
        return tree

    def check_nesting(self, tree: ast.AST) -> None:
        """Refuse an expression nested deeper than MAX_NESTING, without recursing: every pass
        over the IR walks expressions recursively."""
        stack = [(tree, 0)]
        while stack:
            node, depth = stack.pop()
            if isinstance(node, ast.expr):
                depth += 1
                if depth > MAX_NESTING:
                    raise self.error(node, f"an expression nested more than {MAX_NESTING} levels deep; "
                                           "split it into smaller ones")
            elif depth:
                depth = 0
            stack.extend((child, depth) for child in ast.iter_child_nodes(node))

    # -- module and common pieces ------------------------------------------------------------

    def module(self, text: str) -> IRModule:
        for node in self.parse(text).body:
            if isinstance(node, ast.FunctionDef):
                self.function_def(node)
            elif isinstance(node, ast.Assign) and _names(node.targets) == ["constants"]:
                for key, value in self.dict_items(node.value, "constants"):
                    self.mod.const_types[key] = self.type_(value, Scope(), False, "Tensor")
            else:
                raise self.error(node, "unsupported statement at module level; expected "
                                       "`constants = {...}`, @function or @prim_func")
        for node, func in self.tir_calls:
            if not isinstance(self.mod.functions.get(func), T.PrimFunc):
                raise self.error(node, f"call_tir of {func!r}, which is not a prim_func here")
        for call, annotation, declared, value, size_vars in self.control_flow:
            self.check_control_flow(call, annotation, declared, value, size_vars)
        return self.mod

    def check_control_flow(self, call: ast.Call, annotation: ast.AST, declared: G.Type,
                           value, size_vars: set[int]) -> None:
        """The functions an if_/loop/scan calls exist, and its annotated type fits them."""
        name = _call_name(call)
        for kw in call.keywords:
            func = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if func in value.callees and not isinstance(self.mod.functions.get(func),
                                                        G.Function):
                raise self.error(kw.value, f"{name} calls {func!r}, which is not a graph "
                                           "function here")
        try:
            inferred = G.infer_control_flow(value, self.mod.functions)
        except TccError as e:
            raise self.error(call, str(e)) from None
        self.size_vars = size_vars
        self.check_type(annotation, declared, inferred, f"{name} infers")

    def dict_items(self, node: ast.AST, what: str) -> list[tuple[str, ast.expr]]:
        if not isinstance(node, ast.Dict):
            raise self.error(node, f"{what} must be a dict literal")
        items: dict[str, ast.expr] = {}
        for k, v in zip(node.keys, node.values):
            key = self.string(k if k is not None else v, f"a key of {what}")
            if key in items:
                raise self.error(k, f"duplicate key {key!r} in {what}")
            items[key] = v
        return list(items.items())

    def string(self, node: ast.AST, what: str) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise self.error(node, f"{what} must be a string literal")

    def dtype(self, node: ast.AST) -> str:
        """A dtype: a string literal, or a bare name where a scalar parameter is annotated."""
        d = node.id if isinstance(node, ast.Name) else self.string(node, "a dtype")
        if d not in DTYPES:
            raise self.error(node, f"unknown dtype {d!r}; expected one of {', '.join(DTYPES)}")
        return d

    def kwargs(self, call: ast.AST, allowed: tuple[str, ...]) -> dict[str, ast.expr]:
        out: dict[str, ast.expr] = {}
        for kw in call.keywords if isinstance(call, ast.Call) else ():
            if kw.arg not in allowed:
                shown = "**" if kw.arg is None else repr(kw.arg)
                raise self.error(kw.value, f"unexpected argument {shown} to {_call_name(call)}; "
                                           f"expected {', '.join(allowed) or 'none'}")
            out[kw.arg] = kw.value
        return out

    def define(self, scope: Scope, node: ast.AST, name: str, obj):
        if scope.lookup(name) is not None:
            raise self.error(node, f"duplicate definition of {name!r}")
        scope.names[name] = obj
        return obj

    def bind(self, scope: Scope, node: ast.AST, obj):
        """Define a loop/iteration variable or a local buffer, reusing an earlier one of the
        same name and declaration that has gone out of scope."""
        prev = self.bound.get(obj.name)
        if type(prev) is type(obj) and _declaration(prev) == _declaration(obj):
            obj = prev
        self.bound[obj.name] = obj
        return self.define(scope, node, obj.name, obj)

    def size_var(self, name: str, dtype: str = INDEX_DTYPE) -> E.Var:
        v = E.Var(name, dtype)
        self.size_vars.add(id(v))
        return v

    def lookup(self, node: ast.AST, scope: Scope, cls: type, what: str):
        if not isinstance(node, ast.Name):
            raise self.error(node, f"expected a {what} name, got `{ast.unparse(node)}`")
        obj = scope.lookup(node.id)
        if obj is None:
            raise self.error(node, f"undefined {what} {node.id!r}")
        if not isinstance(obj, cls):
            raise self.error(node, f"{node.id!r} is a {_kind(obj)}, not a {what}")
        return obj

    def function_def(self, node: ast.FunctionDef) -> None:
        deco = node.decorator_list[0] if len(node.decorator_list) == 1 else node
        kind = deco.id if isinstance(deco, ast.Name) else _call_name(deco)
        if kind not in ("function", "prim_func"):
            raise self.error(deco, "expected one decorator, @function or @prim_func")
        if isinstance(deco, ast.Call) and deco.args:
            raise self.error(deco, f"@{kind} takes keyword arguments only")
        allowed = ("inputs", "outputs") if kind == "function" else ("attrs",)
        kwargs = self.kwargs(deco, ("name", "sizes", *allowed))
        name = self.string(kwargs["name"], "name") if "name" in kwargs else node.name
        if name in self.mod.functions:
            raise self.error(node, f"duplicate definition of function {name!r}")
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise self.error(node, "parameters must be plain `name: type` pairs")
        self.size_vars, self.bound, self.shape_equal = set(), {}, {}
        scope = Scope()
        for size, dtype in self.dict_items(kwargs.get("sizes", ast.Dict([], [])), "sizes"):
            self.define(scope, dtype, size, self.size_var(size, self.dtype(dtype)))
        build = self.graph_function if kind == "function" else self.prim_func
        self.mod.functions[name] = build(node, kwargs, scope)

    # -- scalar expressions ------------------------------------------------------------------

    def expr(self, node: ast.AST, scope: Scope, define: bool = False) -> E.PrimExpr:
        """A scalar expression; with `define`, an unknown name defines a new size variable."""
        handler = _EXPR_NODES.get(type(node))
        if handler is None:
            raise self.error(node, f"unsupported expression syntax `{ast.unparse(node)}`")
        return handler(self, node, scope, define)

    def name_expr(self, node: ast.Name, scope: Scope, define: bool) -> E.PrimExpr:
        if define and scope.lookup(node.id) is None:
            return self.define(scope, node, node.id, self.size_var(node.id))
        return self.lookup(node, scope, E.Var, "variable")

    def literal_expr(self, node: ast.AST, scope: Scope, define: bool) -> E.PrimExpr:
        v = _number(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return E.Not(self.expr(node.operand, scope, define))
        if v is None:
            hint = " (a minus sign applies to number literals only: write 0 - x)"
            raise self.error(node, f"unsupported expression `{ast.unparse(node)}`"
                                   f"{hint if isinstance(node, ast.UnaryOp) else ''}")
        if isinstance(v, bool):
            return E.IntImm(int(v), "bool")
        return E.IntImm(v, INDEX_DTYPE) if isinstance(v, int) else E.FloatImm(v, "float32")

    def binop_expr(self, node: ast.BinOp, scope: Scope, define: bool) -> E.PrimExpr:
        op = _AST_BIN.get(type(node.op))
        if op is None:
            raise self.error(node, f"unsupported operator in `{ast.unparse(node)}`")
        a, b = self.expr(node.left, scope, define), self.expr(node.right, scope, define)
        return E.BinOp(op, a, b, a.dtype)

    def compare_expr(self, node: ast.Compare, scope: Scope, define: bool) -> E.PrimExpr:
        if len(node.ops) != 1 or type(node.ops[0]) not in _AST_CMP:
            raise self.error(node, f"unsupported comparison `{ast.unparse(node)}` "
                                   "(one of == != < <= > >=, not chained)")
        a, b = self.expr(node.left, scope, define), self.expr(node.comparators[0], scope, define)
        return E.Cmp(_AST_CMP[type(node.ops[0])], a, b)

    def boolop_expr(self, node: ast.BoolOp, scope: Scope, define: bool) -> E.PrimExpr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        out = self.expr(node.values[0], scope, define)
        for v in node.values[1:]:  # Python reads `a and b and c` as one node: fold it left
            out = E.Logic(op, out, self.expr(v, scope, define))
        return out

    def call_expr(self, node: ast.Call, scope: Scope, define: bool) -> E.PrimExpr:
        """Immediates with a dtype, min/max, select, cast, and math intrinsics."""
        name = _call_name(node)
        if name in DTYPES:
            return self.immediate(node, name)
        arity = _ARITY.get(name)
        if arity is None and name not in E.INTRINSICS and name not in E.BUILTINS:
            shown = name or ast.unparse(node.func)
            raise self.error(node, f"unknown function {shown!r} in an expression")
        kwargs = self.kwargs(node, ("dtype",) if arity is None else ())
        if arity is not None and len(node.args) != arity:
            raise self.error(node, f"{name} takes {arity} operands, got {len(node.args)}")
        if name == "cast":
            return E.Cast(self.expr(node.args[1], scope, define), self.dtype(node.args[0]))
        args = [self.expr(a, scope, define) for a in node.args]
        if name in ("min", "max"):
            return E.BinOp(name, args[0], args[1], args[0].dtype)
        if name == "select":
            return E.Select(args[0], args[1], args[2], args[1].dtype)
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else call_default_dtype(name, args)
        if dtype is None:
            raise self.error(node, f"intrinsic {name} without operands needs dtype=")
        return E.Call(name, tuple(args), dtype)

    def immediate(self, node: ast.Call, dtype: str) -> E.PrimExpr:
        """`int32(3)`, `float64(0.5)`, `float32("nan")`, `bool(True)`."""
        arg = node.args[0] if len(node.args) == 1 and not node.keywords else node
        value: Any = _number(arg)
        if is_float(dtype) and isinstance(arg, ast.Constant) and arg.value in NON_FINITE:
            value = NON_FINITE[arg.value]
        if value is None or (isinstance(value, float) and not is_float(dtype)):
            raise self.error(arg, f"{dtype}(...) takes one number literal")
        return E.FloatImm(float(value), dtype) if is_float(dtype) else E.IntImm(int(value), dtype)

    def subscript_expr(self, node: ast.Subscript, scope: Scope, define: bool) -> E.PrimExpr:
        buf = self.lookup(node.value, scope, T.Buffer, "buffer")
        return E.BufferLoad(buf, tuple(self.expr(i, scope, define) for i in _index_nodes(node)))

    def attr(self, node: ast.AST, scope: Scope):
        """An attribute value: plain data reads as Python values, anything else as a scalar
        expression."""
        v = _number(node)
        if v is not None:
            return v
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.attr(e, scope) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if _call_name(node) == "float":
            arg = node.args[0] if len(node.args) == 1 else node
            if not (isinstance(arg, ast.Constant) and arg.value in NON_FINITE):
                raise self.error(node, 'float(...) takes "nan", "inf" or "-inf"')
            return NON_FINITE[arg.value]
        return self.expr(node, scope)

    def attr_pairs(self, node: ast.AST, scope: Scope, what: str) -> tuple[tuple[str, Any], ...]:
        return tuple((k, self.attr(v, scope)) for k, v in self.dict_items(node, what))

    # -- types -------------------------------------------------------------------------------

    def type_(self, node: ast.AST, scope: Scope, define: bool, only: str | None = None) -> G.Type:
        kind = _call_name(node)
        if kind == "Tensor" and len(node.args) == 2 and not node.keywords:
            dtype = self.dtype(node.args[1])
            return G.TensorType(self.dims(node.args[0], scope, define), dtype)
        if kind == "Tuple" and only is None:
            return G.TupleType(tuple(self.type_(a, scope, define) for a in node.args))
        ndim = _int(node.args[0]) if kind == "Shape" and len(node.args) == 1 else None
        if ndim is not None and only is None:
            return G.ShapeType(ndim)
        if kind == "Shape" and len(node.args) == 1 and isinstance(node.args[0], ast.Tuple) \
                and only is None:
            dims = self.dims(node.args[0], scope, define)
            return G.ShapeType(len(dims), dims)
        if kind == "Sequence" and only is None and len(node.args) == 2:
            return self.sequence_type(node)
        if kind == "Optional" and only is None and len(node.args) == 1 and not node.keywords:
            elem = self.type_(node.args[0], scope, define)
            if isinstance(elem, (G.TensorType, G.SequenceType)):
                return G.OptionalType(elem)
        expected = {"Tensor": 'Tensor((dims...), "dtype")'}.get(
            only, 'Tensor((dims...), "dtype"), Tuple(types...), Shape(ndim), Shape((dims...)), '
                  'Sequence((dims or None...) or None, "dtype") or Optional(type)')
        raise self.error(node, f"bad type annotation `{ast.unparse(node)}`; expected {expected}")

    def sequence_type(self, node: ast.Call) -> G.SequenceType:
        """`Sequence(shape, "dtype"[, empty=True])`: the shape is None or a tuple of int
        literals and None (element dims are never size variables)."""
        shape_node, empty = node.args[0], False
        for kw in node.keywords:
            if kw.arg != "empty" or not isinstance(kw.value, ast.Constant) \
                    or not isinstance(kw.value.value, bool):
                raise self.error(kw.value, "Sequence takes only `empty=True` or `empty=False`")
            empty = kw.value.value
        if isinstance(shape_node, ast.Constant) and shape_node.value is None:
            shape = None
        elif isinstance(shape_node, ast.Tuple):
            shape = []
            for d in shape_node.elts:
                if isinstance(d, ast.Constant) and d.value is None:
                    shape.append(None)
                elif _int(d) is not None and _int(d) >= 0:
                    shape.append(_int(d))
                else:
                    raise self.error(d, "a sequence element dimension is an int or None")
        else:
            raise self.error(shape_node, "a sequence's element shape is None or a tuple of "
                                         "ints and None, e.g. (None, 4)")
        return G.SequenceType(self.dtype(node.args[1]), shape, empty)

    def dims(self, node: ast.AST, scope: Scope, define: bool) -> tuple:
        if not isinstance(node, ast.Tuple):
            raise self.error(node, "a shape must be a tuple of dimensions, e.g. (n, 4)")
        return tuple(self.dim(d, scope, define) for d in node.elts)

    def dim(self, node: ast.AST, scope: Scope, define: bool):
        """An int literal stays a Python int (as dimensions hold them); anything else is an
        integer expression (so `int64(4)` reads back as an immediate)."""
        if _int(node) is not None:
            return _int(node)
        e = self.expr(node, scope, define)
        if is_float(e.dtype) or e.dtype == "bool":
            raise self.error(node, f"a dimension must be an integer expression, got {e.dtype}")
        return e

    def check_type(self, node: ast.AST, declared: G.Type, inferred: G.Type, what: str) -> None:
        """Declared and inferred types agree; a dimension the inference could not know (a
        fresh variable) takes the declared one, matched by position."""
        if not self._types_agree(declared, inferred, {}):
            raise self.error(node, f"type annotation {format_type(declared)} does not match "
                                   f"the type {what}: {format_type(inferred)}")

    def _types_agree(self, a: G.Type, b: G.Type, fresh: dict) -> bool:
        if isinstance(a, G.TensorType) and isinstance(b, G.TensorType):
            return (a.dtype == b.dtype and a.ndim == b.ndim
                    and all(self._dims_agree(x, y, fresh) for x, y in zip(a.shape, b.shape)))
        if isinstance(a, G.TupleType) and isinstance(b, G.TupleType):
            return len(a.fields) == len(b.fields) and all(
                self._types_agree(x, y, fresh) for x, y in zip(a.fields, b.fields))
        if isinstance(a, G.OptionalType) and isinstance(b, G.OptionalType):
            return self._types_agree(a.elem, b.elem, fresh)
        if isinstance(a, G.SequenceType) and isinstance(b, G.SequenceType):
            return a == b
        return isinstance(a, G.ShapeType) and isinstance(b, G.ShapeType) and a.ndim == b.ndim
        # a declared Shape((dims...)) matches its value when the program runs, as match_cast

    def _dims_agree(self, declared, inferred, fresh: dict) -> bool:
        if isinstance(inferred, E.Var) and id(inferred) not in self.size_vars:
            fresh.setdefault(inferred, declared)
        inferred = E.substitute(inferred, fresh)
        if any(id(v) not in self.size_vars for v in E.free_vars(inferred)):
            return True  # over fresh variables the declaration cannot be checked against
        if E.prove_equal(declared, inferred):
            return True
        # a size a `shape(...)` binding bound stands for the expression it was bound to
        return E.prove_equal(E.substitute(declared, self.shape_equal),
                             E.substitute(inferred, self.shape_equal))

    def note_shape_binding(self, declared: G.Type, value) -> None:
        """Remember what each size variable a `v: Shape((n, ...)) = shape(expr, ...)` binding
        defines stands for, so later types may name either."""
        if isinstance(value, G.ShapeExpr) and isinstance(declared, G.ShapeType) and declared.dims:
            for d, e in zip(declared.dims, value.dims):
                if isinstance(d, E.Var) and d not in self.shape_equal:
                    self.shape_equal[d] = e

    # -- graph functions ---------------------------------------------------------------------

    def graph_function(self, node: ast.FunctionDef, kwargs: dict, scope: Scope) -> G.Function:
        params = []
        for a in node.args.args:
            if a.annotation is None:
                raise self.error(a, f"parameter {a.arg!r} needs a type annotation")
            t = self.type_(a.annotation, scope, define=True)
            params.append(self.define(scope, a, a.arg, G.Var(a.arg, t)))
        bindings, ret, at_entry = [], None, True
        with contextlib.ExitStack() as assumed:
            for i, stmt in enumerate(node.body):
                if isinstance(stmt, ast.Return) and i == len(node.body) - 1 and stmt.value:
                    ret = self.operand(stmt.value, scope)
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    bindings.append(self.binding(stmt, scope))
                    ranges = facts.checked_ranges(bindings[-1]) if at_entry else None
                    at_entry = ranges is not None
                    if ranges:  # checked first: the types of the ops after assume them
                        assumed.enter_context(facts.assuming(ranges))
                else:
                    raise self.error(stmt, "unsupported statement in a graph function; expected "
                                           "`name: type = value` bindings and a final return")
        if ret is None:
            raise self.error(node, f"function {node.name!r} must end with a return of a value")
        if node.returns is not None:
            declared = self.type_(node.returns, scope, False)
            self.check_type(node.returns, declared, G.type_of(ret), "the returned value has")
        names = [self.names(kwargs, key) for key in ("inputs", "outputs")]
        if names[0] and len(names[0]) != len(params):
            msg = f"{len(names[0])} input names for {len(params)} parameters"
            raise self.error(kwargs["inputs"], msg)
        return G.Function(tuple(params), tuple(bindings), ret, *names)

    def names(self, kwargs: dict, key: str) -> tuple[str, ...]:
        node = kwargs.get(key, ast.List([]))
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error(node, f"{key} must be a list of strings")
        return tuple(self.string(e, f"an entry of {key}") for e in node.elts)

    def binding(self, stmt: ast.AnnAssign, scope: Scope) -> G.Binding:
        value, inferred, what = self.binding_value(stmt.value, scope)
        declared = self.type_(stmt.annotation, scope, define=True)
        if isinstance(value, G.CONTROL_FLOW):
            entry = (stmt.value, stmt.annotation, declared, value, self.size_vars)
            self.control_flow.append(entry)
        else:
            self.check_type(stmt.annotation, declared, inferred, what)
            self.note_shape_binding(declared, value)
        var = self.define(scope, stmt.target, stmt.target.id, G.Var(stmt.target.id, declared))
        return G.Binding(var, value)

    def binding_value(self, node: ast.expr, scope: Scope):
        """The bound value, its inferred type, and what the type comes from (for messages)."""
        name = _call_name(node) or ""
        if name.startswith("op."):
            return self.op_call(node, scope)
        if name == "call_tir":
            value = self.call_tir(node, scope)
            return value, value.out_type, "call_tir declares"
        if name in _CONTROL_FLOW:
            return self.control_flow_node(node, scope), None, f"{name} infers"
        if name == "shape":
            value: Any = self.shape_expr(node, scope)
        else:
            value = self.operand(node, scope)
        if value is None:
            raise self.error(node, "cannot bind None")
        return value, G.type_of(value), "the value has"

    def shape_expr(self, node: ast.Call, scope: Scope) -> G.ShapeExpr:
        """`shape(d0, d1, checks=[(condition, "message"), ...])`."""
        checks = []
        for kw in node.keywords:
            if kw.arg != "checks" or not isinstance(kw.value, ast.List):
                raise self.error(kw.value, 'shape(...) takes only checks=[(condition, "message"), ...]')
            for item in kw.value.elts:
                if not (isinstance(item, ast.Tuple) and len(item.elts) == 2
                        and isinstance(item.elts[1], ast.Constant)
                        and isinstance(item.elts[1].value, str)):
                    raise self.error(item, 'a check is a (condition, "message") pair')
                cond = self.expr(item.elts[0], scope)
                if cond.dtype != "bool":
                    raise self.error(item, f"a check's condition must be bool, got {cond.dtype}")
                checks.append((cond, item.elts[1].value))
        return G.ShapeExpr(self.dims(ast.Tuple(node.args), scope, False), tuple(checks))

    def op_call(self, node: ast.Call, scope: Scope):
        op = node.func.attr
        args = tuple(self.operand(a, scope) for a in node.args)
        attrs: dict[str, Any] = {}
        for kw in node.keywords:  # `**{"key": value}` holds keys that are not identifiers
            pairs = ([(kw.arg, self.attr(kw.value, scope))] if kw.arg is not None
                     else self.attr_pairs(kw.value, scope, "attributes"))
            for k, v in pairs:
                if k in attrs:
                    raise self.error(kw.value, f"duplicate attribute {k!r}")
                attrs[k] = v
        try:
            _, inferred = infer_call(op, args, attrs)
        except TccError as e:
            raise self.error(node, str(e)) from None
        return G.Call(op, args, attrs), inferred, f"op.{op} infers"

    def call_tir(self, node: ast.Call, scope: Scope) -> G.CallTIR:
        kwargs = self.kwargs(node, ("out", "shape_args"))
        shape_args = kwargs.get("shape_args", ast.List([]))
        if (len(node.args) != 2 or not isinstance(node.args[1], ast.List) or "out" not in kwargs
                or not isinstance(shape_args, ast.List)):
            raise self.error(node, 'expected call_tir("func", [args...], out=type)')
        func = self.string(node.args[0], "call_tir's function")
        self.tir_calls.append((node, func))
        args = tuple(self.operand(a, scope) for a in node.args[1].elts)
        out = self.type_(kwargs["out"], scope, False)
        return G.CallTIR(func, args, out, tuple(self.expr(e, scope) for e in shape_args.elts))

    def control_flow_node(self, node: ast.Call, scope: Scope):
        """`if_(cond, then_branch="f", ...)`, `loop(body="f", ...)`, `scan(body="f", ...)`:
        every field once, the first `positional` of them without their keyword."""
        name = _call_name(node)
        cls, positional, fields = _CONTROL_FLOW[name]
        given = dict(zip([f for f, _ in fields], node.args))
        given.update(self.kwargs(node, tuple(f for f, _ in fields[positional:])))
        missing = [f for f, _ in fields if f not in given]
        if len(node.args) > positional or missing:
            usage = ", ".join(f if i < positional else f"{f}=..."
                              for i, (f, _) in enumerate(fields))
            raise self.error(node, f"expected {name}({usage})")
        values = {f: self.control_flow_field(given[f], kind, scope, f)
                  for f, kind in fields}
        return cls(**values)

    def control_flow_field(self, node: ast.AST, kind: str, scope: Scope, field: str):
        if kind == "operand":
            return self.operand(node, scope)
        if kind == "function":
            return self.string(node, field)
        if kind == "int":
            if _int(node) is None:
                raise self.error(node, f"{field} must be an integer literal")
            return _int(node)
        if not isinstance(node, ast.List):
            raise self.error(node, f"{field} must be a list")
        if kind == "operands":
            return tuple(self.operand(e, scope) for e in node.elts)
        return tuple(self.control_flow_field(e, "int", scope, f"an entry of {field}")
                     for e in node.elts)

    def operand(self, node: ast.AST, scope: Scope):
        """A graph value: a variable, const("name"), None, a tuple or a tuple item."""
        if isinstance(node, ast.Constant) and node.value is None:
            return None
        if _call_name(node) == "const" and len(node.args) == 1:
            name = self.string(node.args[0], "a constant name")
            if name not in self.mod.const_types:
                raise self.error(node, f"unknown constant {name!r}; list it in `constants`")
            return G.Constant(name, self.mod.const_types[name])
        if isinstance(node, ast.Tuple):
            return G.Tuple(tuple(self.operand(e, scope) for e in node.elts))
        if isinstance(node, ast.Subscript):
            value, index = self.operand(node.value, scope), _int(node.slice)
            t = G.type_of(value) if value is not None else None
            if index is None or not isinstance(t, G.TupleType) or not 0 <= index < len(t.fields):
                shown = format_type(t) if t is not None else "None"
                raise self.error(node, f"`{ast.unparse(node)}` needs an index literal in range "
                                       f"for a tuple, got a value of type {shown}")
            return G.TupleGetItem(value, index)
        if isinstance(node, ast.Call):
            raise self.error(node, "a call must be bound to a variable before it is used")
        return self.lookup(node, scope, G.Var, "variable")

    # -- prim funcs --------------------------------------------------------------------------

    def prim_func(self, node: ast.FunctionDef, kwargs: dict, scope: Scope) -> T.PrimFunc:
        args = node.args.args
        for a in args:  # scalar parameters first: buffer shapes may name them
            if isinstance(a.annotation, ast.Name):
                self.define(scope, a, a.arg, self.size_var(a.arg, self.dtype(a.annotation)))
        params = []
        for a in args:
            if _call_name(a.annotation) == "Buffer":
                buf = self.buffer_decl(a.arg, a.annotation, scope, True)
                params.append(self.define(scope, a, a.arg, buf))
            elif isinstance(a.annotation, ast.Name):
                params.append(scope.lookup(a.arg))
            else:
                raise self.error(a, f"parameter {a.arg!r} needs a Buffer(...) or dtype annotation")
        attrs = self.attr_pairs(kwargs["attrs"], scope, "attrs") if "attrs" in kwargs else ()
        return T.PrimFunc(tuple(params), self.stmts(node.body, scope), attrs)

    def buffer_decl(self, name: str, node: ast.Call, scope: Scope, define: bool) -> T.Buffer:
        """`(shape), "dtype"[, scope="..."]`, the arguments of Buffer/alloc_buffer/allocate."""
        kwargs = self.kwargs(node, ("scope",))
        if len(node.args) != 2:
            raise self.error(node, f'expected {_call_name(node)}((dims...), "dtype"[, scope=...])')
        mem = self.string(kwargs["scope"], "a memory scope") if "scope" in kwargs else "global"
        return T.Buffer(name, self.dims(node.args[0], scope, define), self.dtype(node.args[1]), mem)

    def stmts(self, body: list[ast.stmt], scope: Scope) -> T.Stmt:
        return T.seq(*[self.stmt(s, scope) for s in body])

    def stmt(self, node: ast.stmt, scope: Scope) -> T.Stmt:
        if isinstance(node, ast.Pass):
            return T.seq()
        if isinstance(node, ast.For) and not node.orelse:
            return self.for_stmt(node, scope)
        if isinstance(node, ast.If):
            then = self.stmts(node.body, scope.child())
            other = self.stmts(node.orelse, scope.child()) if node.orelse else None
            return T.IfThenElse(self.expr(node.test, scope), then, other)
        if isinstance(node, ast.With) and len(node.items) == 1:
            return self.with_stmt(node, scope)
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Subscript)):
            target = node.targets[0]
            buf = self.lookup(target.value, scope, T.Buffer, "buffer")
            indices = tuple(self.expr(i, scope) for i in _index_nodes(target))
            return T.BufferStore(buf, self.expr(node.value, scope), indices)
        call = node.value if isinstance(node, ast.Expr) else None
        if _call_name(call) == "evaluate" and len(call.args) == 1:
            return T.Evaluate(self.expr(call.args[0], scope))
        raise self.error(node, f"unsupported statement `{ast.unparse(node).splitlines()[0]}` here")

    def for_stmt(self, node: ast.For, scope: Scope) -> T.For:
        kind, it = _call_name(node.iter), node.iter
        if kind not in _FOR_KINDS or not isinstance(node.target, ast.Name) or len(it.args) != 2:
            raise self.error(it, "expected `for var in KIND(min, extent)` with KIND one of "
                                 f"{', '.join(_FOR_KINDS)}")
        kwargs = self.kwargs(it, ("thread", "annotations", "dtype"))
        lo, extent = (self.expr(a, scope) for a in it.args)
        tag = self.string(kwargs["thread"], "thread") if "thread" in kwargs else None
        notes = kwargs.get("annotations")
        notes = self.attr_pairs(notes, scope, "annotations") if notes is not None else ()
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else INDEX_DTYPE
        inner = scope.child()
        var = self.bind(inner, node.target, E.Var(node.target.id, dtype))
        return T.For(var, lo, extent, _FOR_KINDS[kind], self.stmts(node.body, inner), tag, notes)

    def with_stmt(self, node: ast.With, scope: Scope) -> T.Stmt:
        item = node.items[0]
        kind = _call_name(item.context_expr)
        if kind == "block" and item.optional_vars is None:
            return self.block(node, scope)
        if kind == "allocate" and isinstance(item.optional_vars, ast.Name):
            inner = scope.child()
            buf = self.buffer_decl(item.optional_vars.id, item.context_expr, scope, False)
            buf = self.bind(inner, item.optional_vars, buf)
            return T.Allocate(buf, self.stmts(node.body, inner))
        if kind == "init":
            raise self.error(node, "with init() belongs in a block header, before the block's body")
        raise self.error(node, 'expected `with block("name"):` or `with allocate(...) as name:`')

    def block(self, node: ast.With, scope: Scope) -> T.Block:
        call = node.items[0].context_expr
        if len(call.args) != 1 or call.keywords:
            raise self.error(call, 'expected block("name")')
        name = self.string(call.args[0], "a block name")
        inner = scope.child()
        header: dict[str, Any] = {"iter_vars": [], "alloc_buffers": []}
        body = list(node.body)
        while body and self.block_header(body[0], scope, inner, header):
            body.pop(0)
        return T.Block(name, tuple(header["iter_vars"]), header.get("reads", ()),
                       header.get("writes", ()), self.stmts(body, inner), header.get("init"),
                       tuple(header["alloc_buffers"]), header.get("annotations", ()))

    def block_header(self, node: ast.stmt, outer: Scope, inner: Scope, header: dict) -> bool:
        """Read one block header statement into `header`; False at the first body statement."""
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, kind = node.targets[0], _call_name(node.value) or ""
            if kind.startswith("axis.") and kind[5:] in _ITER_KINDS:
                header["iter_vars"].append(self.iter_var(target, node.value, outer, inner))
            elif kind == "alloc_buffer":
                buf = self.buffer_decl(target.id, node.value, inner, False)
                header["alloc_buffers"].append(self.bind(inner, target, buf))
            return kind == "alloc_buffer" or kind.startswith("axis.")
        if isinstance(node, ast.With) and _call_name(node.items[0].context_expr) == "init":
            self.once(node, header, "init", self.stmts(node.body, inner.child()))
            return True
        call = node.value if isinstance(node, ast.Expr) else None
        kind = _call_name(call)
        if kind in ("reads", "writes"):
            self.once(node, header, kind, tuple(self.region(r, inner) for r in call.args))
        elif kind == "block_attr" and len(call.args) == 1:
            self.once(node, header, "annotations", self.attr_pairs(call.args[0], inner, kind))
        return kind in ("reads", "writes", "block_attr")

    def once(self, node: ast.AST, header: dict, key: str, value) -> None:
        if key in header:
            raise self.error(node, f"a block has one {key}")
        header[key] = value

    def iter_var(self, target: ast.Name, call: ast.Call, outer: Scope, inner: Scope) -> T.IterVar:
        kind = call.func.attr
        kwargs = self.kwargs(call, ("dtype",))
        if len(call.args) != 2:
            raise self.error(call, f"expected axis.{kind}(extent, binding)")
        extent, binding = (self.expr(a, outer) for a in call.args)
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else INDEX_DTYPE
        var = self.bind(inner, target, E.Var(target.id, dtype))
        return T.IterVar(var, extent, _ITER_KINDS[kind], binding)

    def region(self, node: ast.AST, scope: Scope) -> T.BufferRegion:
        """`A[i, j:j + 4]`: a point is (i, 1); a slice's stop is written `min + extent`."""
        if not isinstance(node, ast.Subscript):
            raise self.error(node, "a region is written buffer[index or min:min + extent, ...]")
        ranges = []
        for idx in _index_nodes(node):
            if not isinstance(idx, ast.Slice):
                ranges.append((self.expr(idx, scope), E.IntImm(1, INDEX_DTYPE)))
                continue
            lo, up = idx.lower, idx.upper
            if lo is None or up is None or idx.step is not None:
                raise self.error(idx, "a region slice needs min:min + extent")
            if _int(lo) == 0 and isinstance(lo, ast.Constant):
                extent = up
            elif isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add) and _same(up.left, lo):
                extent = up.right
            else:
                raise self.error(up, f"a region slice's stop must be `{ast.unparse(lo)} + extent`")
            ranges.append((self.expr(lo, scope), self.expr(extent, scope)))
        buf = self.lookup(node.value, scope, T.Buffer, "buffer")
        return T.BufferRegion(buf, tuple(ranges))


_EXPR_NODES = {
    ast.Name: Parser.name_expr,
    ast.Constant: Parser.literal_expr,
    ast.UnaryOp: Parser.literal_expr,
    ast.BinOp: Parser.binop_expr,
    ast.Compare: Parser.compare_expr,
    ast.BoolOp: Parser.boolop_expr,
    ast.Call: Parser.call_expr,
    ast.Subscript: Parser.subscript_expr,
}


def _names(nodes: list[ast.expr]) -> list[str]:
    return [n.id if isinstance(n, ast.Name) else "" for n in nodes]


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _declaration(obj) -> tuple:
    if isinstance(obj, T.Buffer):
        return (obj.shape, obj.dtype, obj.scope)
    return (obj.dtype,)


def parse_module(text: str, filename: str = "<text>") -> IRModule:
    """Parse module text (as print_module writes it); constants come back without values."""
    return Parser(filename).module(text)


def parse_expr(text: str, variables: dict[str, E.PrimExpr] | None = None,
               filename: str = "<expr>") -> E.PrimExpr:
    """Parse one scalar expression; `variables` maps the names it may use to variables."""
    parser = Parser(filename)
    scope = Scope()
    scope.names.update(variables or {})
    return parser.expr(parser.parse(text, "eval").body, scope)
