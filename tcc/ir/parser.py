"""The IR text parser: rebuilds an IRModule from the text `tcc.ir.printer` writes.

The text is Python syntax, read with Python's `ast` module and never evaluated. Every node
is built directly (`BinOp("add", a, b, dtype)`, not `a + b`), so nothing is simplified and
`parse_module(print_module(m))` is structurally equal to `m`. Each op call's annotated type
is checked against the op registry's inference. Every problem with the text is a ParseError
whose one-line message starts with `file:line:col:`; docs/ir-text.md describes the syntax.
"""

from __future__ import annotations

import ast
from typing import Any

from tcc.ir.builder import infer_call
from tcc.ir.dtype import DTYPES, INDEX_DTYPE, is_float
from tcc.ir.errors import ParseError, TccError
from tcc.ir.expr import (
    INTRINSICS,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Logic,
    Not,
    PrimExpr,
    Select,
    Var,
    free_vars,
    prove_equal,
    substitute,
)
from tcc.ir.graph import (
    Binding,
    CallTIR,
    Constant,
    Function,
    ShapeExpr,
    ShapeType,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    type_of,
)
from tcc.ir.graph import Call as GCall
from tcc.ir.graph import Var as GVar
from tcc.ir.module import IRModule
from tcc.ir.printer import BIN_SYNTAX, CMP_SYNTAX, NON_FINITE, call_default_dtype, format_type
from tcc.ir.tir import (
    Allocate,
    Block,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)

_AST_BIN = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
    ast.FloorDiv: "floordiv", ast.Mod: "floormod",
}  # fmt: skip
_AST_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
assert set(_AST_BIN.values()) == set(BIN_SYNTAX) and set(_AST_CMP.values()) == set(CMP_SYNTAX)
_FOR_KINDS = {k.value: k for k in ForKind}
_ITER_KINDS = {k.value: k for k in IterKind}


class Scope:
    """Names visible at one point of a function; a child scope sees its parents' names."""

    def __init__(self, parent: Scope | None = None):
        self.parent = parent
        self.names: dict[str, object] = {}

    def lookup(self, name: str):
        s: Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def child(self) -> Scope:
        return Scope(self)


def _call_name(node: ast.AST) -> str | None:
    """`f` for a call `f(...)`, `a.f` for `a.f(...)`, else None."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return None


class Parser:
    """Reads one module's text; methods take the AST node they report errors at."""

    def __init__(self, filename: str):
        self.filename = filename
        self.mod = IRModule()
        self.size_vars: set[int] = set()  # ids of the size variables the current function has
        # Loop variables and buffers of the current function by name: a name bound again in
        # a later sibling scope is the same object, as it was when printed.
        self.bound: dict[str, object] = {}
        self.tir_calls: list[tuple[ast.AST, str]] = []

    def error(self, node: ast.AST, msg: str) -> ParseError:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        return ParseError(f"{self.filename}:{line}:{col}: {msg}")

    # -- module ------------------------------------------------------------------------------

    def module(self, text: str) -> IRModule:
        try:
            tree = ast.parse(text, self.filename)
        except SyntaxError as e:
            line, col = e.lineno or 1, e.offset or 1
            raise ParseError(f"{self.filename}:{line}:{col}: invalid Python syntax: {e.msg}") from None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.function_def(node)
            elif self._is_constants(node):
                self.constants(node.value)
            else:
                raise self.error(node, "unsupported statement at module level; expected "
                                       "`constants = {...}`, @function or @prim_func")
        for node, func in self.tir_calls:
            if not isinstance(self.mod.functions.get(func), PrimFunc):
                raise self.error(node, f"call_tir of {func!r}, which is not a prim_func of the module")
        return self.mod

    @staticmethod
    def _is_constants(node: ast.stmt) -> bool:
        return (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "constants")

    def constants(self, node: ast.expr) -> None:
        for key, value in self.dict_items(node, "constants"):
            self.mod.const_types[key] = self.tensor_type(value, Scope(), define=False)

    def dict_items(self, node: ast.AST, what: str) -> list[tuple[str, ast.expr]]:
        if not isinstance(node, ast.Dict):
            raise self.error(node, f"{what} must be a dict literal")
        items, seen = [], set()
        for k, v in zip(node.keys, node.values):
            key = self.string(k, f"a key of {what}") if k is not None else None
            if key is None:
                raise self.error(v, f"{what}: `**` is not allowed here")
            if key in seen:
                raise self.error(k, f"duplicate key {key!r} in {what}")
            seen.add(key)
            items.append((key, v))
        return items

    def string(self, node: ast.AST, what: str) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise self.error(node, f"{what} must be a string literal")

    def dtype(self, node: ast.AST) -> str:
        d = self.string(node, "a dtype")
        if d not in DTYPES:
            raise self.error(node, f"unknown dtype {d!r}; expected one of {', '.join(DTYPES)}")
        return d

    def dtype_name(self, node: ast.Name) -> str:
        """A dtype written as a bare name (a scalar parameter's annotation)."""
        if node.id not in DTYPES:
            raise self.error(node, f"unknown dtype {node.id!r}; expected one of {', '.join(DTYPES)}")
        return node.id

    def string_list(self, node: ast.AST, what: str) -> tuple[str, ...]:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error(node, f"{what} must be a list of strings")
        return tuple(self.string(e, f"an entry of {what}") for e in node.elts)

    def function_def(self, node: ast.FunctionDef) -> None:
        if len(node.decorator_list) != 1:
            raise self.error(node, f"function {node.name!r} needs one decorator, @function or @prim_func")
        deco = node.decorator_list[0]
        kind = deco.id if isinstance(deco, ast.Name) else _call_name(deco)
        if kind not in ("function", "prim_func"):
            raise self.error(deco, "unknown decorator; expected @function or @prim_func")
        kwargs = self.keywords(deco, ("name", "inputs", "outputs", "sizes", "attrs"))
        name = self.string(kwargs.pop("name"), "name") if "name" in kwargs else node.name
        if name in self.mod.functions:
            raise self.error(node, f"duplicate definition of function {name!r}")
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
            raise self.error(node, "parameters must be plain `name: type` pairs")
        self.size_vars, self.bound = set(), {}
        scope = Scope()
        for size, dtype in self.dict_items(kwargs.pop("sizes", ast.Dict([], [])), "sizes"):
            self.define(scope, dtype, size, self.size_var(size, self.dtype(dtype)))
        if kind == "function":
            self.mod.functions[name] = self.graph_function(node, kwargs, scope)
        else:
            self.mod.functions[name] = self.prim_func(node, kwargs, scope)

    def keywords(self, call: ast.AST, allowed: tuple[str, ...]) -> dict[str, ast.expr]:
        if not isinstance(call, ast.Call):
            return {}
        if len(call.args) > 0:
            raise self.error(call.args[0], "expected keyword arguments only")
        out = {}
        for kw in call.keywords:
            if kw.arg not in allowed:
                raise self.error(kw.value, f"unknown argument {kw.arg!r}; expected {', '.join(allowed)}")
            out[kw.arg] = kw.value
        return out

    def define(self, scope: Scope, node: ast.AST, name: str, obj):
        if scope.lookup(name) is not None:
            raise self.error(node, f"duplicate definition of {name!r}")
        scope.names[name] = obj
        return obj

    def bind(self, scope: Scope, node: ast.AST, obj):
        """Define a loop/iteration variable or a local buffer, reusing an earlier one of the
        same name and kind that has gone out of scope."""
        prev = self.bound.get(obj.name)
        if type(prev) is type(obj) and _same_decl(prev, obj):
            obj = prev
        self.bound[obj.name] = obj
        return self.define(scope, node, obj.name, obj)

    def size_var(self, name: str, dtype: str = INDEX_DTYPE) -> Var:
        v = Var(name, dtype)
        self.size_vars.add(id(v))
        return v

    # -- scalar expressions ------------------------------------------------------------------

    def expr(self, node: ast.AST, scope: Scope, define: bool = False) -> PrimExpr:
        """A scalar expression; with `define`, an unknown name defines a new size variable."""
        handler = _EXPR_NODES.get(type(node))
        if handler is None:
            raise self.error(node, f"unsupported expression syntax `{ast.unparse(node)}`")
        return handler(self, node, scope, define)

    def name_expr(self, node: ast.Name, scope: Scope, define: bool) -> PrimExpr:
        obj = scope.lookup(node.id)
        if obj is None and define:
            obj = self.define(scope, node, node.id, self.size_var(node.id))
        if obj is None:
            raise self.error(node, f"undefined variable {node.id!r}")
        if not isinstance(obj, Var):
            raise self.error(node, f"{node.id!r} is a {_kind(obj)}, not a scalar")
        return obj

    def number(self, node: ast.AST) -> int | float | bool | None:
        """The value of a number literal (`3`, `-0.5`, `True`), or None when it is not one."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant)
                and type(node.operand.value) in (int, float)):
            return -node.operand.value
        return None

    def literal_expr(self, node: ast.Constant, scope: Scope, define: bool) -> PrimExpr:
        v = self.number(node)
        if v is None:
            raise self.error(node, f"unsupported literal `{ast.unparse(node)}` in an expression")
        if isinstance(v, bool):
            return IntImm(int(v), "bool")
        return IntImm(v, INDEX_DTYPE) if isinstance(v, int) else FloatImm(v, "float32")

    def unary_expr(self, node: ast.UnaryOp, scope: Scope, define: bool) -> PrimExpr:
        if isinstance(node.op, ast.Not):
            return Not(self.expr(node.operand, scope, define))
        if self.number(node) is None:
            raise self.error(node, f"unsupported expression `{ast.unparse(node)}` (a minus sign "
                                   "applies to number literals only; write 0 - x)")
        return self.literal_expr(node, scope, define)

    def binop_expr(self, node: ast.BinOp, scope: Scope, define: bool) -> PrimExpr:
        op = _AST_BIN.get(type(node.op))
        if op is None:
            raise self.error(node, f"unsupported operator in `{ast.unparse(node)}`")
        a, b = self.expr(node.left, scope, define), self.expr(node.right, scope, define)
        return BinOp(op, a, b, a.dtype)

    def compare_expr(self, node: ast.Compare, scope: Scope, define: bool) -> PrimExpr:
        if len(node.ops) != 1 or type(node.ops[0]) not in _AST_CMP:
            raise self.error(node, f"unsupported comparison `{ast.unparse(node)}` "
                                   "(one of == != < <= > >=, not chained)")
        a = self.expr(node.left, scope, define)
        return Cmp(_AST_CMP[type(node.ops[0])], a, self.expr(node.comparators[0], scope, define))

    def boolop_expr(self, node: ast.BoolOp, scope: Scope, define: bool) -> PrimExpr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        out = self.expr(node.values[0], scope, define)
        for v in node.values[1:]:  # Python reads `a and b and c` as one node: fold it left
            out = Logic(op, out, self.expr(v, scope, define))
        return out

    def call_expr(self, node: ast.Call, scope: Scope, define: bool) -> PrimExpr:
        """Immediates with a dtype, min/max, select, cast, and math intrinsics."""
        name = _call_name(node)
        if name in DTYPES:
            return self.immediate(node, name)
        arity = {"min": 2, "max": 2, "select": 3, "cast": 2}.get(name)
        if arity is None and name not in INTRINSICS:
            raise self.error(node, f"unknown function {name or ast.unparse(node.func)!r} in an expression")
        kwargs = self.keywords_of(node, ("dtype",) if arity is None else ())
        if arity is not None and len(node.args) != arity:
            raise self.error(node, f"{name} takes {arity} operands, got {len(node.args)}")
        if name == "cast":
            return Cast(self.expr(node.args[1], scope, define), self.dtype(node.args[0]))
        args = [self.expr(a, scope, define) for a in node.args]
        if name in ("min", "max"):
            return BinOp(name, args[0], args[1], args[0].dtype)
        if name == "select":
            return Select(args[0], args[1], args[2], args[1].dtype)
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else call_default_dtype(name, args)
        if dtype is None:
            raise self.error(node, f"intrinsic {name} without operands needs dtype=")
        return Call(name, tuple(args), dtype)

    def keywords_of(self, call: ast.Call, allowed: tuple[str, ...]) -> dict[str, ast.expr]:
        out = {}
        for kw in call.keywords:
            if kw.arg not in allowed:
                shown = "**" if kw.arg is None else repr(kw.arg)
                raise self.error(kw.value if kw.arg is None else kw,
                                 f"unexpected argument {shown} to {_call_name(call)}")
            out[kw.arg] = kw.value
        return out

    def immediate(self, node: ast.Call, dtype: str) -> PrimExpr:
        """`int32(3)`, `float64(0.5)`, `float32("nan")`, `bool(True)`."""
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, f"{dtype}(...) takes one number")
        arg = node.args[0]
        value: Any = self.number(arg)
        if is_float(dtype) and isinstance(arg, ast.Constant) and arg.value in NON_FINITE:
            value = NON_FINITE[arg.value]
        if value is None or (isinstance(value, float) and not is_float(dtype)):
            raise self.error(arg, f"{dtype}(...) takes a number literal, got `{ast.unparse(arg)}`")
        return FloatImm(float(value), dtype) if is_float(dtype) else IntImm(int(value), dtype)

    def subscript_expr(self, node: ast.Subscript, scope: Scope, define: bool) -> PrimExpr:
        buf = self.buffer(node.value, scope)
        return BufferLoad(buf, tuple(self.expr(i, scope, define) for i in _index_nodes(node)))

    def buffer(self, node: ast.AST, scope: Scope) -> Buffer:
        if not isinstance(node, ast.Name):
            raise self.error(node, f"expected a buffer name, got `{ast.unparse(node)}`")
        obj = scope.lookup(node.id)
        if obj is None:
            raise self.error(node, f"undefined buffer {node.id!r}")
        if not isinstance(obj, Buffer):
            raise self.error(node, f"{node.id!r} is a {_kind(obj)}, not a buffer")
        return obj

    # -- attribute values --------------------------------------------------------------------

    def attr(self, node: ast.AST, scope: Scope):
        """Plain data reads as Python values; anything else is a scalar expression."""
        v = self.number(node)
        if v is not None:
            return v
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
            return node.value
        if isinstance(node, ast.List):
            return [self.attr(e, scope) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.attr(e, scope) for e in node.elts)
        if _call_name(node) == "float":
            arg = node.args[0] if len(node.args) == 1 else None
            if not (isinstance(arg, ast.Constant) and arg.value in NON_FINITE):
                raise self.error(node, 'float(...) takes "nan", "inf" or "-inf"')
            return NON_FINITE[arg.value]
        return self.expr(node, scope)

    def attr_pairs(self, node: ast.AST, scope: Scope, what: str) -> tuple[tuple[str, Any], ...]:
        return tuple((k, self.attr(v, scope)) for k, v in self.dict_items(node, what))

    # -- types -------------------------------------------------------------------------------

    def type_(self, node: ast.AST, scope: Scope, define: bool) -> Type:
        kind = _call_name(node)
        if kind == "Tensor":
            return self.tensor_type(node, scope, define)
        if kind == "Tuple":
            return TupleType(tuple(self.type_(a, scope, define) for a in node.args))
        if kind == "Shape" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
            return ShapeType(int(node.args[0].value))
        raise self.error(node, f"bad type annotation `{ast.unparse(node)}`; expected "
                               'Tensor((dims...), "dtype"), Tuple(types...) or Shape(ndim)')

    def tensor_type(self, node: ast.AST, scope: Scope, define: bool) -> TensorType:
        if _call_name(node) != "Tensor" or len(node.args) != 2 or node.keywords:
            raise self.error(node, f'bad tensor type `{ast.unparse(node)}`; expected Tensor((dims...), "dtype")')
        dtype = self.dtype(node.args[1])
        return TensorType(self.dims(node.args[0], scope, define), dtype)

    def dims(self, node: ast.AST, scope: Scope, define: bool) -> tuple:
        if not isinstance(node, ast.Tuple):
            raise self.error(node, "a shape must be a tuple of dimensions, e.g. (n, 4)")
        return tuple(self.dim(d, scope, define) for d in node.elts)

    def dim(self, node: ast.AST, scope: Scope, define: bool):
        """An int literal stays a Python int (as dimensions hold them); anything else is an
        integer expression (so `int64(4)` reads back as an immediate)."""
        v = self.number(node)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        e = self.expr(node, scope, define)
        if is_float(e.dtype) or e.dtype == "bool":
            raise self.error(node, f"a dimension must be an integer expression, got {e.dtype}")
        return e

    def check_type(self, node: ast.AST, declared: Type, inferred: Type, what: str) -> None:
        """Declared and inferred types agree; a dimension the inference could not know (a
        fresh variable) takes the declared one, matched by position."""
        fresh: dict = {}
        if not self._types_agree(declared, inferred, fresh):
            raise self.error(node, f"type annotation {format_type(declared)} does not match "
                                   f"the type {what}: {format_type(inferred)}")

    def _types_agree(self, a: Type, b: Type, fresh: dict) -> bool:
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            return (a.dtype == b.dtype and a.ndim == b.ndim
                    and all(self._dims_agree(x, y, fresh) for x, y in zip(a.shape, b.shape)))
        if isinstance(a, TupleType) and isinstance(b, TupleType):
            return len(a.fields) == len(b.fields) and all(
                self._types_agree(x, y, fresh) for x, y in zip(a.fields, b.fields))
        return isinstance(a, ShapeType) and isinstance(b, ShapeType) and a.ndim == b.ndim

    def _dims_agree(self, declared, inferred, fresh: dict) -> bool:
        if isinstance(inferred, Var) and id(inferred) not in self.size_vars:
            fresh.setdefault(inferred, declared)
        inferred = substitute(inferred, fresh)
        if any(id(v) not in self.size_vars for v in free_vars(inferred)):
            return True  # over fresh variables the declaration cannot be checked against
        return prove_equal(declared, inferred)

    # -- graph functions ---------------------------------------------------------------------

    def graph_function(self, node: ast.FunctionDef, kwargs: dict, scope: Scope) -> Function:
        if "attrs" in kwargs:
            raise self.error(kwargs["attrs"], "a graph function takes no attrs")
        params = []
        for a in node.args.args:
            if a.annotation is None:
                raise self.error(a, f"parameter {a.arg!r} needs a type annotation")
            t = self.type_(a.annotation, scope, define=True)
            params.append(self.define(scope, a, a.arg, GVar(a.arg, t)))
        bindings, ret = [], None
        for i, stmt in enumerate(node.body):
            if isinstance(stmt, ast.Return) and i == len(node.body) - 1 and stmt.value is not None:
                ret = self.operand(stmt.value, scope)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                bindings.append(self.binding(stmt, scope))
            else:
                raise self.error(stmt, "unsupported statement in a graph function; expected "
                                       "`name: type = value` bindings and a final return")
        if ret is None:
            raise self.error(node, f"function {node.name!r} must end with a return")
        if node.returns is not None:
            self.check_type(node.returns, self.type_(node.returns, scope, False), type_of(ret),
                            "the returned value has")
        inputs = self.string_list(kwargs["inputs"], "inputs") if "inputs" in kwargs else ()
        outputs = self.string_list(kwargs["outputs"], "outputs") if "outputs" in kwargs else ()
        if inputs and len(inputs) != len(params):
            raise self.error(kwargs["inputs"], f"inputs names {len(inputs)} values for {len(params)} parameters")
        return Function(tuple(params), tuple(bindings), ret, inputs, outputs)

    def binding(self, stmt: ast.AnnAssign, scope: Scope) -> Binding:
        value, inferred, what = self.binding_value(stmt.value, scope)
        declared = self.type_(stmt.annotation, scope, define=True)
        self.check_type(stmt.annotation, declared, inferred, what)
        var = self.define(scope, stmt.target, stmt.target.id, GVar(stmt.target.id, declared))
        return Binding(var, value)

    def binding_value(self, node: ast.expr, scope: Scope):
        """The bound value, its inferred type, and what the type comes from (for messages)."""
        name = _call_name(node)
        if name is not None and name.startswith("op."):
            return self.op_call(node, scope)
        if name == "call_tir":
            value = self.call_tir(node, scope)
            return value, value.out_type, "call_tir declares"
        if name == "shape":
            value = ShapeExpr(tuple(self.dims(ast.Tuple(node.args), scope, False)))
            return value, type_of(value), "the shape has"
        value = self.operand(node, scope)
        if value is None:
            raise self.error(node, "cannot bind None")
        return value, type_of(value), "the value has"

    def op_call(self, node: ast.Call, scope: Scope):
        op = node.func.attr
        args = tuple(self.operand(a, scope) for a in node.args)
        attrs: dict[str, Any] = {}
        for kw in node.keywords:
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
        return GCall(op, args, attrs), inferred, f"op.{op} infers"

    def call_tir(self, node: ast.Call, scope: Scope) -> CallTIR:
        kwargs = self.keywords_of(node, ("out", "shape_args"))
        if len(node.args) != 2 or not isinstance(node.args[1], ast.List) or "out" not in kwargs:
            raise self.error(node, 'expected call_tir("func", [args...], out=type)')
        func = self.string(node.args[0], "call_tir's function")
        self.tir_calls.append((node, func))
        args = tuple(self.operand(a, scope) for a in node.args[1].elts)
        shape_args = ()
        if "shape_args" in kwargs:
            if not isinstance(kwargs["shape_args"], ast.List):
                raise self.error(kwargs["shape_args"], "shape_args must be a list")
            shape_args = tuple(self.expr(e, scope) for e in kwargs["shape_args"].elts)
        return CallTIR(func, args, self.type_(kwargs["out"], scope, False), shape_args)

    def operand(self, node: ast.AST, scope: Scope):
        """A graph value: a variable, const("name"), None, a tuple or a tuple item."""
        if isinstance(node, ast.Name):
            obj = scope.lookup(node.id)
            if obj is None:
                raise self.error(node, f"undefined variable {node.id!r}")
            if not isinstance(obj, GVar):
                raise self.error(node, f"{node.id!r} is a {_kind(obj)}, not a graph value")
            return obj
        if isinstance(node, ast.Constant) and node.value is None:
            return None
        if _call_name(node) == "const" and len(node.args) == 1:
            name = self.string(node.args[0], "a constant name")
            if name not in self.mod.const_types:
                raise self.error(node, f"unknown constant {name!r}; list it in `constants`")
            return Constant(name, self.mod.const_types[name])
        if isinstance(node, ast.Tuple):
            return Tuple(tuple(self.operand(e, scope) for e in node.elts))
        if isinstance(node, ast.Subscript):
            return self.tuple_item(node, scope)
        if isinstance(node, ast.Call):
            raise self.error(node, "a call must be bound to a variable before it is used")
        raise self.error(node, f"unsupported graph value `{ast.unparse(node)}`")

    def tuple_item(self, node: ast.Subscript, scope: Scope) -> TupleGetItem:
        value = self.operand(node.value, scope)
        index = self.number(node.slice)
        t = type_of(value) if value is not None else None
        if not isinstance(index, int) or isinstance(index, bool):
            raise self.error(node.slice, "a tuple index must be an integer literal")
        if not isinstance(t, TupleType) or not 0 <= index < len(t.fields):
            raise self.error(node, f"index {index} is out of range for a value of type {format_type(t)}")
        return TupleGetItem(value, index)

    # -- prim funcs --------------------------------------------------------------------------

    def prim_func(self, node: ast.FunctionDef, kwargs: dict, scope: Scope) -> PrimFunc:
        for key in ("inputs", "outputs"):
            if key in kwargs:
                raise self.error(kwargs[key], f"a prim_func takes no {key}")
        args = node.args.args
        for a in args:  # scalar parameters first: buffer shapes may name them
            if isinstance(a.annotation, ast.Name):
                dtype = self.dtype_name(a.annotation)
                self.define(scope, a, a.arg, self.size_var(a.arg, dtype))
        params = []
        for a in args:
            if _call_name(a.annotation) == "Buffer":
                params.append(self.define(scope, a, a.arg, self.buffer_decl(a.arg, a.annotation, scope, True)))
            elif isinstance(a.annotation, ast.Name):
                params.append(scope.lookup(a.arg))
            else:
                raise self.error(a, f"parameter {a.arg!r} needs a Buffer(...) or dtype annotation")
        attrs = self.attr_pairs(kwargs["attrs"], scope, "attrs") if "attrs" in kwargs else ()
        return PrimFunc(tuple(params), self.stmts(node.body, scope), attrs)

    def buffer_decl(self, name: str, node: ast.AST, scope: Scope, define: bool) -> Buffer:
        """`(shape), "dtype"[, scope="..."]`, the arguments of Buffer/alloc_buffer/allocate."""
        kwargs = self.keywords_of(node, ("scope",))
        if len(node.args) != 2:
            raise self.error(node, f'expected {_call_name(node)}((dims...), "dtype"[, scope="..."])')
        mem = self.string(kwargs["scope"], "a memory scope") if "scope" in kwargs else "global"
        return Buffer(name, self.dims(node.args[0], scope, define), self.dtype(node.args[1]), mem)

    def stmts(self, body: list[ast.stmt], scope: Scope) -> Stmt:
        return seq(*[self.stmt(s, scope) for s in body])

    def stmt(self, node: ast.stmt, scope: Scope) -> Stmt:
        if isinstance(node, ast.Pass):
            return seq()
        if isinstance(node, ast.For) and not node.orelse:
            return self.for_stmt(node, scope)
        if isinstance(node, ast.If):
            else_case = self.stmts(node.orelse, scope.child()) if node.orelse else None
            return IfThenElse(self.expr(node.test, scope), self.stmts(node.body, scope.child()), else_case)
        if isinstance(node, ast.With) and len(node.items) == 1:
            return self.with_stmt(node, scope)
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Subscript)):
            target = node.targets[0]
            indices = tuple(self.expr(i, scope) for i in _index_nodes(target))
            return BufferStore(self.buffer(target.value, scope), self.expr(node.value, scope), indices)
        if isinstance(node, ast.Expr) and _call_name(node.value) == "evaluate" and len(node.value.args) == 1:
            return Evaluate(self.expr(node.value.args[0], scope))
        raise self.error(node, f"unsupported statement `{ast.unparse(node).splitlines()[0]}` here")

    def for_stmt(self, node: ast.For, scope: Scope) -> For:
        kind = _call_name(node.iter)
        if kind not in _FOR_KINDS or not isinstance(node.target, ast.Name) or len(node.iter.args) != 2:
            raise self.error(node.iter, f"expected `for var in KIND(min, extent)` with KIND one of "
                                        f"{', '.join(_FOR_KINDS)}")
        kwargs = self.keywords_of(node.iter, ("thread", "annotations", "dtype"))
        lo, extent = (self.expr(a, scope) for a in node.iter.args)
        tag = self.string(kwargs["thread"], "thread") if "thread" in kwargs else None
        annotations = self.attr_pairs(kwargs["annotations"], scope, "annotations") if "annotations" in kwargs else ()
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else INDEX_DTYPE
        inner = scope.child()
        var = self.bind(inner, node.target, Var(node.target.id, dtype))
        return For(var, lo, extent, _FOR_KINDS[kind], self.stmts(node.body, inner), tag, annotations)

    def with_stmt(self, node: ast.With, scope: Scope) -> Stmt:
        item = node.items[0]
        kind = _call_name(item.context_expr)
        if kind == "block" and item.optional_vars is None:
            return self.block(node, scope)
        if kind == "allocate" and isinstance(item.optional_vars, ast.Name):
            name = item.optional_vars.id
            inner = scope.child()
            buf = self.bind(inner, item.optional_vars, self.buffer_decl(name, item.context_expr, scope, False))
            return Allocate(buf, self.stmts(node.body, inner))
        if kind == "init":
            raise self.error(node, "with init() belongs in a block header, before the block's body")
        raise self.error(node, 'expected `with block("name"):` or `with allocate(...) as name:`')

    def block(self, node: ast.With, scope: Scope) -> Block:
        call = node.items[0].context_expr
        if len(call.args) != 1 or call.keywords:
            raise self.error(call, 'expected block("name")')
        name = self.string(call.args[0], "a block name")
        inner = scope.child()
        header: dict[str, Any] = {"iter_vars": [], "alloc_buffers": []}
        body = list(node.body)
        while body and self.block_header(body[0], scope, inner, header):
            body.pop(0)
        return Block(name, tuple(header["iter_vars"]), header.get("reads", ()),
                     header.get("writes", ()), self.stmts(body, inner), header.get("init"),
                     tuple(header["alloc_buffers"]), header.get("annotations", ()))

    def block_header(self, node: ast.stmt, outer: Scope, inner: Scope, header: dict) -> bool:
        """Read one block header statement into `header`; False at the first body statement."""
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, kind = node.targets[0], _call_name(node.value)
            if kind is not None and kind.startswith("axis.") and kind[5:] in _ITER_KINDS:
                header["iter_vars"].append(self.iter_var(target, node.value, kind[5:], outer, inner))
                return True
            if kind == "alloc_buffer":
                buf = self.buffer_decl(target.id, node.value, inner, False)
                header["alloc_buffers"].append(self.bind(inner, target, buf))
                return True
            return False
        if isinstance(node, ast.With) and _call_name(node.items[0].context_expr) == "init":
            self.once(node, header, "init", self.stmts(node.body, inner.child()))
            return True
        kind = _call_name(node.value) if isinstance(node, ast.Expr) else None
        if kind in ("reads", "writes"):
            regions = tuple(self.region(r, inner) for r in node.value.args)
            self.once(node, header, kind, regions)
            return True
        if kind == "block_attr" and len(node.value.args) == 1:
            self.once(node, header, "annotations", self.attr_pairs(node.value.args[0], inner, "block_attr"))
            return True
        return False

    def once(self, node: ast.AST, header: dict, key: str, value) -> None:
        if key in header:
            raise self.error(node, f"a block has one {key}")
        header[key] = value

    def iter_var(self, target: ast.Name, call: ast.Call, kind: str, outer: Scope, inner: Scope) -> IterVar:
        kwargs = self.keywords_of(call, ("dtype",))
        if len(call.args) != 2:
            raise self.error(call, f"expected axis.{kind}(extent, binding)")
        extent, binding = (self.expr(a, outer) for a in call.args)
        dtype = self.dtype(kwargs["dtype"]) if "dtype" in kwargs else INDEX_DTYPE
        var = self.bind(inner, target, Var(target.id, dtype))
        return IterVar(var, extent, _ITER_KINDS[kind], binding)

    def region(self, node: ast.AST, scope: Scope) -> BufferRegion:
        """`A[i, j:j + 4]`: a point is (i, 1); a slice's stop is written `min + extent`."""
        if not isinstance(node, ast.Subscript):
            raise self.error(node, "a region is written buffer[index or min:min + extent, ...]")
        ranges = []
        for idx in _index_nodes(node):
            if not isinstance(idx, ast.Slice):
                ranges.append((self.expr(idx, scope), IntImm(1, INDEX_DTYPE)))
                continue
            if idx.lower is None or idx.upper is None or idx.step is not None:
                raise self.error(idx, "a region slice needs min:min + extent")
            up = idx.upper
            if isinstance(idx.lower, ast.Constant) and idx.lower.value == 0 and type(idx.lower.value) is int:
                extent_node = up
            elif (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add)
                    and ast.dump(up.left) == ast.dump(idx.lower)):
                extent_node = up.right
            else:
                raise self.error(up, f"a region slice's stop must be written `{ast.unparse(idx.lower)} + extent`")
            ranges.append((self.expr(idx.lower, scope), self.expr(extent_node, scope)))
        return BufferRegion(self.buffer(node.value, scope), tuple(ranges))


_EXPR_NODES = {
    ast.Name: Parser.name_expr,
    ast.Constant: Parser.literal_expr,
    ast.UnaryOp: Parser.unary_expr,
    ast.BinOp: Parser.binop_expr,
    ast.Compare: Parser.compare_expr,
    ast.BoolOp: Parser.boolop_expr,
    ast.Call: Parser.call_expr,
    ast.Subscript: Parser.subscript_expr,
}


def _index_nodes(node: ast.Subscript) -> list[ast.expr]:
    s = node.slice
    return list(s.elts) if isinstance(s, ast.Tuple) else [s]


def _same_decl(a, b) -> bool:
    if isinstance(a, Buffer):
        return (a.shape, a.dtype, a.scope) == (b.shape, b.dtype, b.scope)
    return a.dtype == b.dtype


def _kind(obj) -> str:
    return {GVar: "graph value", Buffer: "buffer", Var: "scalar"}.get(type(obj), type(obj).__name__)


def parse_module(text: str, filename: str = "<text>") -> IRModule:
    """Parse module text (as print_module writes it); constants come back without values."""
    return Parser(filename).module(text)


def parse_expr(text: str, variables: dict[str, PrimExpr] | None = None,
               filename: str = "<expr>") -> PrimExpr:
    """Parse one scalar expression; `variables` maps the names it may use to variables."""
    parser = Parser(filename)
    try:
        node = ast.parse(text, filename, mode="eval").body
    except SyntaxError as e:
        raise ParseError(f"{filename}:{e.lineno or 1}:{e.offset or 1}: invalid Python syntax: {e.msg}") from None
    scope = Scope()
    scope.names.update(variables or {})
    return parser.expr(node, scope)
