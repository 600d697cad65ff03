"""Placeholder printer (replaced by the full text printer)."""


def format_expr(e) -> str:
    from tcc.ir.expr import BinOp, FloatImm, IntImm, Var

    if isinstance(e, Var):
        return e.name
    if isinstance(e, (IntImm, FloatImm)):
        return repr(e.value)
    if isinstance(e, BinOp):
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%"}
        if e.op in sym:
            return f"({format_expr(e.a)} {sym[e.op]} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    return type(e).__name__
