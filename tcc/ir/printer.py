"""The IR text printer: both IR levels as Python-syntax text (like TVMScript).

`tcc.ir.parser` reads the text back, and `parse_module(print_module(m))` is structurally
equal to `m`; docs/ir-text.md is the reference of the syntax. The printer never loses
structure: expressions print with the fewest parentheses their precedence allows, but every
node prints as itself (nothing is simplified), and immediates whose dtype is not the
default of their literal spell it (`int32(3)`, `float64(0.5)`, `float32("nan")`).

Variables print by name. Names are made valid, unique Python identifiers per function
(each variable object gets one name); the public input/output names of a graph function
print in its decorator, so the original names never need to be identifiers.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Callable

from tcc.ir import expr as E
from tcc.ir import graph as G
from tcc.ir import tir as T
from tcc.ir.dtype import DTYPES, INDEX_DTYPE

# Names the syntax gives a meaning to; variables never print as one of them.
RESERVED = (
    frozenset(
        "op const call_tir shape Tensor Tuple Shape Buffer function prim_func constants float "
        "min max select cast axis reads writes block init alloc_buffer allocate evaluate "
        "block_attr serial parallel vectorized unrolled thread_binding if_ loop scan "
        "__debug__".split()
    )
    | E.INTRINSICS
    | E.BUILTINS
    | frozenset(DTYPES)
)

# Python precedence levels of the syntax used, loosest first.
P_OR, P_AND, P_NOT, P_CMP, P_ADD, P_MUL, P_NEG, P_ATOM = range(1, 9)
BIN_SYNTAX = {
    "add": ("+", P_ADD), "sub": ("-", P_ADD), "mul": ("*", P_MUL), "div": ("/", P_MUL),
    "floordiv": ("//", P_MUL), "floormod": ("%", P_MUL),
}  # fmt: skip
CMP_SYNTAX = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

NameOf = Callable[[object], str]

# Control-flow nodes print as `name(fields...)`: the first `positional` fields bare, the rest
# as keywords. A field is an operand (a value or None), a list of operands, the name of a
# graph function of the module, an int, or a list of ints.
CONTROL_FLOW_SYNTAX: dict[type, tuple[str, int, tuple[tuple[str, str], ...]]] = {
    G.If: ("if_", 1, (("cond", "operand"), ("then_branch", "function"),
                      ("else_branch", "function"), ("args", "operands"))),
    G.Loop: ("loop", 0, (("body", "function"), ("max_trip_count", "operand"),
                         ("cond", "operand"), ("carried", "operands"), ("captured", "operands"))),
    G.Scan: ("scan", 0, (("body", "function"), ("num_scan_inputs", "int"), ("args", "operands"),
                         ("captured", "operands"), ("scan_input_axes", "ints"),
                         ("scan_input_directions", "ints"), ("scan_output_axes", "ints"),
                         ("scan_output_directions", "ints"))),
}


def quote(s: str) -> str:
    """A double-quoted Python string literal of `s`."""
    return json.dumps(s, ensure_ascii=False)


def call_default_dtype(name: str, args) -> str | None:
    """The dtype an intrinsic call has unless it says otherwise (None: it must say)."""
    if name in ("isnan", "isinf"):
        return "bool"
    if name == "syncthreads":
        return "int32"
    return args[0].dtype if args else None


# ---------------------------------------------------------------------------------------------
# scalar expressions


def _raw_name(obj) -> str:
    return obj.name


def _float_text(v: float) -> str:
    """A finite float's exact repr, or the quoted name of a non-finite one."""
    if math.isnan(v):
        return '"nan"'
    if math.isinf(v):
        return '"inf"' if v > 0 else '"-inf"'
    return repr(float(v))


def _int_imm(e: E.IntImm, name_of: NameOf) -> tuple[str, int]:
    v = int(e.value)
    if e.dtype == "bool" and v in (0, 1):
        return ("True" if v else "False"), P_ATOM
    if e.dtype == INDEX_DTYPE:
        return str(v), P_NEG if v < 0 else P_ATOM
    return f"{e.dtype}({v})", P_ATOM


def _float_imm(e: E.FloatImm, name_of: NameOf) -> tuple[str, int]:
    v = float(e.value)
    if e.dtype == "float32" and math.isfinite(v):
        text = repr(v)
        return text, P_NEG if text.startswith("-") else P_ATOM
    return f"{e.dtype}({_float_text(v)})", P_ATOM


def _wrap(e: E.PrimExpr, min_prec: int, name_of: NameOf) -> str:
    text, prec = _EXPR[type(e)](e, name_of)
    return f"({text})" if prec < min_prec else text


def _args(items, name_of: NameOf) -> str:
    return ", ".join(_wrap(a, 0, name_of) for a in items)


def _bin_op(e: E.BinOp, name_of: NameOf) -> tuple[str, int]:
    if e.op not in BIN_SYNTAX:  # min, max
        return f"{e.op}({_args((e.a, e.b), name_of)})", P_ATOM
    sym, prec = BIN_SYNTAX[e.op]
    return f"{_wrap(e.a, prec, name_of)} {sym} {_wrap(e.b, prec + 1, name_of)}", prec


def _cmp(e: E.Cmp, name_of: NameOf) -> tuple[str, int]:
    # Both sides bind tighter than a comparison: Python would chain `a < b < c`.
    a, b = _wrap(e.a, P_CMP + 1, name_of), _wrap(e.b, P_CMP + 1, name_of)
    return f"{a} {CMP_SYNTAX[e.op]} {b}", P_CMP


def _logic(e: E.Logic, name_of: NameOf) -> tuple[str, int]:
    prec = P_AND if e.op == "and" else P_OR
    return f"{_wrap(e.a, prec, name_of)} {e.op} {_wrap(e.b, prec + 1, name_of)}", prec


def _call(e: E.Call, name_of: NameOf) -> tuple[str, int]:
    text = _args(e.args, name_of)
    if e.dtype != call_default_dtype(e.name, e.args):
        text += f"{', ' if e.args else ''}dtype={quote(e.dtype)}"
    return f"{e.name}({text})", P_ATOM


def _indices(indices, name_of: NameOf) -> str:
    if len(indices) == 1:
        return _wrap(indices[0], 0, name_of)
    return _args(indices, name_of) if indices else "()"


_EXPR: dict[type, Callable[[object, NameOf], tuple[str, int]]] = {
    E.Var: lambda e, name_of: (name_of(e), P_ATOM),
    E.IntImm: _int_imm,
    E.FloatImm: _float_imm,
    E.BinOp: _bin_op,
    E.Cmp: _cmp,
    E.Logic: _logic,
    E.Not: lambda e, name_of: (f"not {_wrap(e.a, P_NOT, name_of)}", P_NOT),
    E.Select: lambda e, n: (f"select({_args((e.cond, e.true_value, e.false_value), n)})", P_ATOM),
    E.Cast: lambda e, n: (f"cast({quote(e.dtype)}, {_wrap(e.value, 0, n)})", P_ATOM),
    E.Call: _call,
    E.BufferLoad: lambda e, n: (f"{n(e.buffer)}[{_indices(e.indices, n)}]", P_ATOM),
}


def format_expr(e, name_of: NameOf = _raw_name) -> str:
    """A scalar expression (or a dimension, int or PrimExpr) as text."""
    if isinstance(e, int):
        return str(e)
    return _wrap(e, 0, name_of)


def format_type(t, name_of: NameOf = _raw_name) -> str:
    """A graph type as text: `Tensor((n, 4), "float32")`, `Tuple(...)`, `Shape(2)`,
    `Sequence((None, 4), "float32")`, `Optional(Tensor(...))`."""
    if isinstance(t, G.TensorType):
        return f"Tensor({_dims(t.shape, name_of)}, {quote(t.dtype)})"
    if isinstance(t, G.TupleType):
        return f"Tuple({', '.join(format_type(f, name_of) for f in t.fields)})"
    if isinstance(t, G.ShapeType):
        return f"Shape({t.ndim})" if t.dims is None else f"Shape({_dims(t.dims, name_of)})"
    if isinstance(t, G.SequenceType):
        shape = "None" if t.shape is None else _dims(t.shape, name_of)
        return f"Sequence({shape}, {quote(t.dtype)}{', empty=True' if t.empty else ''})"
    if isinstance(t, G.OptionalType):
        return f"Optional({format_type(t.elem, name_of)})"
    raise TypeError(f"cannot print type {t!r}")


def _dims(dims, name_of: NameOf) -> str:
    return _tuple_text([format_attr(d, name_of) for d in dims]) if dims else "()"


def _tuple_text(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def format_attr(v, name_of: NameOf = _raw_name) -> str:
    """An attribute value: plain data prints as a Python literal, a PrimExpr as an expression
    (an immediate always with its dtype, so it stays apart from a plain number)."""
    if v is None or isinstance(v, (bool, str)):
        return quote(v) if isinstance(v, str) else repr(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        text = _float_text(v)
        return f"float({text})" if text.startswith('"') else text
    if isinstance(v, list):
        return f"[{', '.join(format_attr(x, name_of) for x in v)}]"
    if isinstance(v, tuple):
        return _tuple_text([format_attr(x, name_of) for x in v]) if v else "()"
    if isinstance(v, E.IntImm):
        return f"{v.dtype}({int(v.value)})"
    if isinstance(v, E.FloatImm):
        return f"{v.dtype}({_float_text(v.value)})"
    if isinstance(v, E.PrimExpr):
        return format_expr(v, name_of)
    if hasattr(v, "item"):  # a numpy scalar that slipped into an attribute: print its value
        return format_attr(v.item(), name_of)
    raise TypeError(f"cannot print attribute value {v!r} of type {type(v).__name__}")


def _attr_dict(pairs, name_of: NameOf) -> str:
    return "{" + ", ".join(f"{quote(k)}: {format_attr(v, name_of)}" for k, v in pairs) + "}"


# ---------------------------------------------------------------------------------------------
# names


def _identifier(hint: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "_"
    if s[0].isdigit():
        s = "_" + s
    while keyword.iskeyword(s) or s in RESERVED:  # `if` -> `if_`, itself reserved -> `if__`
        s += "_"
    return s


class Namer:
    """Gives each object a valid identifier, unique within one function (or the module).

    A size variable met while `defining` (printing a type annotation that defines the
    variables it first names) is defined there; one first met anywhere else, or of a dtype
    other than int64, goes to `declared`, for the decorator's `sizes=`.
    """

    def __init__(self):
        self._names: dict[int, tuple[object, str]] = {}
        self._used: set[str] = set()
        self.defining = False
        self.declared: list[E.Var] = []

    def define(self, obj, hint: str) -> str:
        if id(obj) in self._names:
            return self._names[id(obj)][1]
        base = name = _identifier(hint)
        k = 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        self._names[id(obj)] = (obj, name)  # holding obj keeps its id from being reused
        return name

    def __call__(self, obj) -> str:
        entry = self._names.get(id(obj))
        if entry:
            return entry[1]
        if isinstance(obj, E.Var) and (not self.defining or obj.dtype != INDEX_DTYPE):
            self.declared.append(obj)
        return self.define(obj, obj.name)

    def type_defining(self, t) -> str:
        """Format a type annotation that defines the size variables it first names."""
        self.defining = True
        try:
            return format_type(t, self)
        finally:
            self.defining = False


def _decorator(kind: str, defname: str, name: str, kwargs: list[str], namer: Namer) -> str:
    if defname != name:
        kwargs.insert(0, f"name={quote(name)}")
    if namer.declared:
        decls = ", ".join(f"{quote(namer(v))}: {quote(v.dtype)}" for v in namer.declared)
        kwargs.append(f"sizes={{{decls}}}")
    return f"@{kind}({', '.join(kwargs)})" if kwargs else f"@{kind}"


# ---------------------------------------------------------------------------------------------
# graph functions


def _graph_expr(e, namer: Namer) -> str:
    if e is None:
        return "None"
    if isinstance(e, G.Var):
        return namer(e)
    if isinstance(e, G.Constant):
        return f"const({quote(e.name)})"
    if isinstance(e, G.Tuple):
        return _tuple_text([_graph_expr(f, namer) for f in e.fields]) if e.fields else "()"
    if isinstance(e, G.TupleGetItem):
        return f"{_graph_expr(e.value, namer)}[{e.index}]"
    if isinstance(e, G.ShapeExpr):
        parts = [format_attr(d, namer) for d in e.dims]
        if e.checks:
            checks = [f"({format_expr(c, namer)}, {quote(m)})" for c, m in e.checks]
            parts.append(f"checks=[{', '.join(checks)}]")
        return f"shape({', '.join(parts)})"
    if isinstance(e, G.Call):
        args = [_graph_expr(a, namer) for a in e.args]
        plain = [f"{k}={format_attr(v, namer)}" for k, v in e.attrs.items() if _plain_kw(k)]
        odd = {k: v for k, v in e.attrs.items() if not _plain_kw(k)}
        if odd:
            plain.append(f"**{_attr_dict(odd.items(), namer)}")
        return f"op.{e.op}({', '.join(args + plain)})"
    if type(e) in CONTROL_FLOW_SYNTAX:
        return _control_flow(e, namer)
    if isinstance(e, G.CallTIR):
        args = ", ".join(_graph_expr(a, namer) for a in e.args)
        text = f"call_tir({quote(e.func)}, [{args}], out={format_type(e.out_type, namer)}"
        if e.shape_args:
            text += f", shape_args=[{', '.join(format_expr(d, namer) for d in e.shape_args)}]"
        return text + ")"
    raise TypeError(f"cannot print graph expression {type(e).__name__}")


def _control_flow(e, namer: Namer) -> str:
    name, positional, fields = CONTROL_FLOW_SYNTAX[type(e)]
    parts = []
    for i, (field, kind) in enumerate(fields):
        v = getattr(e, field)
        if kind == "operand":
            text = _graph_expr(v, namer)
        elif kind == "operands":
            text = f"[{', '.join(_graph_expr(a, namer) for a in v)}]"
        elif kind == "function":
            text = quote(v)
        elif kind == "ints":
            text = f"[{', '.join(str(int(x)) for x in v)}]"
        else:
            text = str(int(v))
        parts.append(text if i < positional else f"{field}={text}")
    return f"{name}({', '.join(parts)})"


def _plain_kw(key: str) -> bool:
    return key.isidentifier() and not keyword.iskeyword(key)


def print_function(name: str, func: G.Function, defname: str | None = None) -> str:
    """A graph function as text; `defname` is its identifier in the text (default: from name)."""
    namer = Namer()
    params = []
    for p in func.params:
        params.append(f"{namer.define(p, p.name)}: {namer.type_defining(p.type)}")
    lines = []
    for b in func.bindings:  # the parser reads the value before the annotation
        value = _graph_expr(b.value, namer)
        var = namer.define(b.var, b.var.name)
        lines.append(f"    {var}: {namer.type_defining(b.var.type)} = {value}")
    lines.append(f"    return {_graph_expr(func.ret, namer)}")
    kwargs = [
        f"inputs=[{', '.join(quote(n) for n in func.input_names)}]",
        f"outputs=[{', '.join(quote(n) for n in func.output_names)}]",
    ]
    defname = defname or _identifier(name)
    ret = format_type(func.ret_type, namer)
    head = [_decorator("function", defname, name, kwargs, namer),
            f"def {defname}({', '.join(params)}) -> {ret}:"]
    return "\n".join(head + lines) + "\n"


# ---------------------------------------------------------------------------------------------
# prim funcs


class _PrimPrinter:
    """Prints a PrimFunc's statements, one indented line at a time, into `lines`."""

    def __init__(self):
        self.namer = Namer()
        self.lines: list[str] = []

    def expr(self, e) -> str:
        return format_expr(e, self.namer)

    def buffer_decl(self, buf: T.Buffer) -> str:
        scope = "" if buf.scope == "global" else f", scope={quote(buf.scope)}"
        return f"{_dims(buf.shape, self.namer)}, {quote(buf.dtype)}{scope}"

    def region(self, r: T.BufferRegion) -> str:
        parts = []
        for lo, ext in r.ranges:
            if isinstance(ext, E.IntImm) and ext.value == 1 and ext.dtype == INDEX_DTYPE:
                parts.append(self.expr(lo))
            elif isinstance(lo, E.IntImm) and lo.value == 0 and lo.dtype == INDEX_DTYPE:
                parts.append(f"0:{self.expr(ext)}")
            else:  # the stop is written `min + extent`, so both read back unchanged
                stop = f"{_wrap(lo, P_ADD, self.namer)} + {_wrap(ext, P_ADD + 1, self.namer)}"
                parts.append(f"{self.expr(lo)}:{stop}")
        index = ", ".join(parts) if len(parts) != 1 else parts[0]
        return f"{self.namer(r.buffer)}[{index or '()'}]"

    def emit(self, s: T.Stmt, indent: int) -> None:
        _STMT[type(s)](self, s, indent)

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def body(self, s: T.Stmt, indent: int) -> None:
        if isinstance(s, T.SeqStmt) and not s.stmts:
            self.line(indent, "pass")
        else:
            self.emit(s, indent)

    def seq(self, s: T.SeqStmt, indent: int) -> None:
        for x in s.stmts:
            self.body(x, indent)

    def for_(self, s: T.For, indent: int) -> None:
        var = self.namer.define(s.var, s.var.name)
        args = [self.expr(s.min), self.expr(s.extent)]
        if s.thread_tag is not None:
            args.append(f"thread={quote(s.thread_tag)}")
        if s.annotations:
            args.append(f"annotations={_attr_dict(s.annotations, self.namer)}")
        if s.var.dtype != INDEX_DTYPE:
            args.append(f"dtype={quote(s.var.dtype)}")
        self.line(indent, f"for {var} in {s.kind.value}({', '.join(args)}):")
        self.body(s.body, indent + 1)

    def if_(self, s: T.IfThenElse, indent: int) -> None:
        self.line(indent, f"if {self.expr(s.cond)}:")
        self.body(s.then_case, indent + 1)
        if s.else_case is not None:
            self.line(indent, "else:")
            self.body(s.else_case, indent + 1)

    def allocate(self, s: T.Allocate, indent: int) -> None:
        decl = self.buffer_decl(s.buffer)
        name = self.namer.define(s.buffer, s.buffer.name)
        self.line(indent, f"with allocate({decl}) as {name}:")
        self.body(s.body, indent + 1)

    def store(self, s: T.BufferStore, indent: int) -> None:
        index = _indices(s.indices, self.namer)
        self.line(indent, f"{self.namer(s.buffer)}[{index}] = {self.expr(s.value)}")

    def block(self, s: T.Block, indent: int) -> None:
        self.line(indent, f"with block({quote(s.name)}):")
        inner = indent + 1
        for iv in s.iter_vars:  # the binding reads the loop variables outside the block
            binding = f"{self.expr(iv.extent)}, {self.expr(iv.binding)}"
            dtype = "" if iv.var.dtype == INDEX_DTYPE else f", dtype={quote(iv.var.dtype)}"
            name = self.namer.define(iv.var, iv.var.name)
            self.line(inner, f"{name} = axis.{iv.kind.value}({binding}{dtype})")
        for buf in s.alloc_buffers:
            decl = self.buffer_decl(buf)
            self.line(inner, f"{self.namer.define(buf, buf.name)} = alloc_buffer({decl})")
        self.line(inner, f"reads({', '.join(self.region(r) for r in s.reads)})")
        self.line(inner, f"writes({', '.join(self.region(r) for r in s.writes)})")
        if s.annotations:
            self.line(inner, f"block_attr({_attr_dict(s.annotations, self.namer)})")
        if s.init is not None:
            self.line(inner, "with init():")
            self.body(s.init, inner + 1)
        self.body(s.body, inner)


_STMT: dict[type, Callable[[_PrimPrinter, object, int], None]] = {
    T.SeqStmt: _PrimPrinter.seq,
    T.For: _PrimPrinter.for_,
    T.IfThenElse: _PrimPrinter.if_,
    T.Allocate: _PrimPrinter.allocate,
    T.BufferStore: _PrimPrinter.store,
    T.Evaluate: lambda p, s, indent: p.line(indent, f"evaluate({p.expr(s.value)})"),
    T.Block: _PrimPrinter.block,
}


def print_prim_func(name: str, func: T.PrimFunc, defname: str | None = None) -> str:
    """A PrimFunc as text; `defname` is its identifier in the text (default: from name)."""
    p = _PrimPrinter()
    for param in func.params:  # the parser defines scalar parameters first
        if isinstance(param, E.Var):
            p.namer.define(param, param.name)
    params = []
    for param in func.params:
        if isinstance(param, T.Buffer):
            p.namer.defining = True
            decl = p.buffer_decl(param)
            p.namer.defining = False
            params.append(f"{p.namer.define(param, param.name)}: Buffer({decl})")
        else:
            params.append(f"{p.namer(param)}: {param.dtype}")
    p.body(func.body, 1)
    kwargs = [f"attrs={_attr_dict(func.attrs, p.namer)}"] if func.attrs else []
    defname = defname or _identifier(name)
    head = [_decorator("prim_func", defname, name, kwargs, p.namer),
            f"def {defname}({', '.join(params)}):"]
    return "\n".join(head + p.lines) + "\n"


# ---------------------------------------------------------------------------------------------
# modules


def print_module(mod) -> str:
    """An IRModule as text: the constants' types, then every function in order."""
    parts = ["# tcc IR module\n"]
    if mod.const_types:
        entries = "".join(
            f"    {quote(k)}: {format_type(t)},\n" for k, t in mod.const_types.items()
        )
        parts[0] += f"constants = {{\n{entries}}}\n"
    globals_ = Namer()
    for name, func in mod.functions.items():
        defname = globals_.define(name, name)
        if isinstance(func, G.Function):
            parts.append(print_function(name, func, defname))
        else:
            parts.append(print_prim_func(name, func, defname))
    return "\n\n".join(parts)
