"""Well-formedness of a module read from outside (a .tcir file): what the parser accepts as
text but no stage may be handed. Runs on every module `load_module` reads; it changes
nothing and raises a VerifyError naming the function and the statement.

Checked today: every loop's extent, when it is a constant, is not negative. (A module's
buffer accesses are not yet proven in bounds: docs/security.md says what that means for
.tcir files from elsewhere.)
"""

from __future__ import annotations

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.errors import TccError


class VerifyError(TccError):
    """A loaded module breaks a rule every stage relies on."""


def verify_module(mod, where: str = "the module") -> None:
    for name, func in mod.functions.items():
        if isinstance(func, T.PrimFunc):
            _verify_stmt(func.body, f"{where}: prim_func {name!r}")


def _verify_stmt(stmt, where: str) -> None:
    stack = [stmt]
    while stack:  # iterative: a crafted module may nest deeply
        s = stack.pop()
        if isinstance(s, T.For):
            if isinstance(s.extent, E.IntImm) and s.extent.value < 0:
                raise VerifyError(f"{where}: loop {s.var.name!r} has extent {s.extent.value}; the second "
                                  "argument of a loop is its number of iterations and must not be negative")
            stack.append(s.body)
        elif isinstance(s, T.SeqStmt):
            stack.extend(s.stmts)
        elif isinstance(s, T.IfThenElse):
            stack.extend(x for x in (s.then_case, s.else_case) if x is not None)
        elif isinstance(s, T.Block):
            stack.extend(x for x in (s.body, s.init) if x is not None)
        elif isinstance(s, T.Allocate):
            stack.append(s.body)
