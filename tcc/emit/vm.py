"""The VM bytecode compiler: legalized graph functions -> `tcc.rt.format.Executable`.

Every graph function becomes one VM function of register code: straight-line, except that
an `If` adds two forward jumps and a `Loop` or `Scan` one loop whose only backward jump
returns to an `if` that may leave it (the verifier accepts no other backward jump and no
recursion, so only a loop's condition can keep a program running). A Loop or Scan calls its
body function once per iteration, with a 0-d tensor counter, and stacks the per-iteration
scan outputs at the end. Size variables live in a per-frame shape heap: the
prologue's `match_shape` calls check each parameter against the signature and bind its
variables; every later shape (an output to allocate, a view's new shape) is a postfix
program over that heap evaluated by `make_shape` at run time, so one executable serves
every batch size. Kernel outputs the function neither returns nor hands back live in an
arena (`tcc.lower.passes.plan_memory`): one `alloc_arena` once the size variables of their
sizes are bound, given each tensor's byte size and lifetime (the instructions from its
binding's first to its last reader's last), which places them at run time; then an
`arena_view` per output. The others, and every output with planning off, get their own
`alloc_tensor`. The executable also records which bindings call each kernel
(`kernel_origins`), so `tcc run --profile` names kernels after the model's nodes.
Spec: docs/vm.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from tcc.errors import TccError
from tcc.ir import expr as E
from tcc.ir import graph as G
from tcc.ir.module import IRModule
from tcc.ir.printer import format_expr
from tcc.lower.legalize import kernel_origins
from tcc.lower.passes.plan_memory import VIEW_OPS, Arena, MemoryPlan, plan_memory
from tcc.rt.format import (
    DTYPES,
    INT64_MAX,
    NO_REG,
    SHAPE_BINOPS,
    SHAPE_CMPS,
    ArgKind,
    DimMode,
    Executable,
    FuncKind,
    Instr,
    Op,
    ShapeOp,
    VMFunction,
)

# VIEW_OPS (from the memory planner, which must know them too): graph ops the VM runs
# itself; each keeps the data in row-major order, so its result is a view with the shape of
# the binding's type.
__all__ = ["VIEW_OPS", "VM_OPS", "VMCompileError", "compile_module", "signature"]

# Graph ops the VM runs itself: the views, a copy, and reading sizes from a tensor.
VM_OPS = VIEW_OPS | {"identity", "tensor_to_shape"}


_SWAPPED = {"gt": "lt", "ge": "le"}  # a > b is b < a


class VMCompileError(TccError):
    """A graph function the VM cannot run (an op left unlegalized, an unsupported node)."""


def compile_module(
    mod: IRModule,
    symbols: Mapping[str, str] | None = None,
    entries: list[str] | None = None,
    plan: bool = True,
) -> Executable:
    """Compile every graph function of a legalized module. `symbols` maps a PrimFunc's name
    to its kernel symbol (default: the same name); `entries` defaults to the graph
    functions no other function calls. With `plan` (the default) kernel outputs share
    arenas as `tcc.lower.passes.plan_memory` decides; without it every output is allocated
    on its own."""
    graph = mod.graph_functions
    callees = {c for f in graph.values() for b in f.bindings
               if isinstance(b.value, G.CONTROL_FLOW) for c in b.value.callees}
    entries = entries if entries is not None else [n for n in graph if n not in callees]
    unlegalized = sorted({b.value.op for f in graph.values() for b in f.bindings
                          if isinstance(b.value, G.Call) and b.value.op not in VM_OPS})
    if unlegalized:
        raise VMCompileError(f"ops without a loop program left in the graph: "
                             f"{', '.join(unlegalized)}; legalize the module before emitting")
    b = _ExeBuilder(mod, dict(symbols or {}))
    for name in graph:
        fplan = plan_memory(graph[name]) if plan else MemoryPlan(())
        b.exe.functions.append(_FunctionCompiler(b, name, graph[name], fplan).compile())
    for name in entries:
        if name not in graph:
            raise VMCompileError(f"entry function {name!r} is not a graph function of the module")
        b.exe.signatures[name] = signature(graph[name], name)
        _check_pack_dtypes(b.exe.signatures[name], name)
    b.exe.kernel_origins = _origins_by_symbol(mod, b.symbols)
    return b.exe


def _check_pack_dtypes(sig: dict, name: str) -> None:
    """Every input and output must have a dtype a pack can carry (tcc.rt.format.DTYPES)."""
    for kind in ("inputs", "outputs"):
        for t in sig[kind]:
            if t["dtype"] not in DTYPES:
                raise VMCompileError(
                    f"{kind[:-1]} {t['name']!r} of {name!r} has dtype {t['dtype']}, which a pack "
                    "cannot carry (packs hold numbers and booleans); run the model with the "
                    "reference interpreter (`tcc run FILE.tcir`) instead")


def _origins_by_symbol(mod: IRModule, symbols: Mapping[str, str]) -> dict[str, list[str]]:
    """The bindings that call each kernel, keyed by the symbol the bytecode calls."""
    out: dict[str, dict[str, None]] = {}
    for func, names in kernel_origins(mod).items():
        out.setdefault(symbols.get(func, func), {}).update(dict.fromkeys(names))
    return {sym: list(names) for sym, names in out.items()}


def signature(fn: G.Function, name: str = "main") -> dict:
    """The JSON description of an entry function: names, dtypes, symbolic shapes."""
    def one(pub: str, t: G.Type, what: str) -> dict:
        if not isinstance(t, G.TensorType):
            kind = {G.SequenceType: "a sequence", G.OptionalType: "an optional"}.get(
                type(t), "not a tensor")
            raise VMCompileError(
                f"entry function {name!r}: {what} {pub!r} is {kind}; a compiled pack takes and "
                "gives tensors only; run the model with the reference interpreter instead "
                "(`tcc import MODEL -o m.tcir`, then `tcc run m.tcir`)")
        return {"name": pub, "dtype": t.dtype,
                "shape": [d if isinstance(d, int) else format_expr(d) for d in t.shape]}

    outs = fn.outputs
    out_names = fn.output_names or tuple(f"output_{i}" for i in range(len(outs)))
    return {
        "inputs": [one(n, p.type, "input") for n, p in zip(fn.input_names, fn.params)],
        "outputs": [one(n, G.type_of(o), "output") for n, o in zip(out_names, outs)],
    }


class _ExeBuilder:
    """Interns function-table entries and constants so equal ones share one index."""

    def __init__(self, mod: IRModule, symbols: dict[str, str]):
        self.mod, self.symbols = mod, symbols
        self.exe = Executable()
        self._table: dict[tuple, int] = {}
        self._consts: dict[tuple, int] = {}

    def func(self, kind: FuncKind, name: str) -> int:
        key = (kind, name)
        if key not in self._table:
            self._table[key] = len(self.exe.table)
            self.exe.table.append(key)
        return self._table[key]

    def const(self, value: tuple[int, ...] | str) -> int:
        key = (type(value).__name__, value)
        if key not in self._consts:
            self._consts[key] = len(self.exe.constants)
            self.exe.constants.append(value)
        return self._consts[key]


class _FunctionCompiler:
    def __init__(self, b: _ExeBuilder, name: str, fn: G.Function, plan: MemoryPlan):
        self.b, self.name, self.fn, self.plan = b, name, fn, plan
        self.places = plan.places()  # (binding, output) -> (arena, tensor index)
        self.arenas: dict[int, tuple[int, int]] = {}  # arena -> (its register, its alloc's pc)
        self.binding_code: list[tuple[int, int]] = []  # per binding: its first and last pc
        self.at = 0  # the binding being compiled
        self.code: list[Instr] = []
        self.regs: dict[int, int] = {}  # id(graph Var) -> register
        self.num_regs = 0
        self.slots: dict[E.Var, int] = {}  # size variable -> heap slot
        self.heap_names: list[str] = []
        self.constants: dict[str, int] = {}  # weight name -> register holding it

    # -- emission helpers ------------------------------------------------------------------

    def new_reg(self) -> int:
        self.num_regs += 1
        return self.num_regs - 1

    def builtin(self, name: str, *args: tuple[int, int], result: bool = True,
                dst: int | None = None) -> int:
        """Call builtin `name`; its result goes to `dst`, else to a new register."""
        if dst is None:
            dst = self.new_reg() if result else NO_REG
        self.code.append(Instr(Op.CALL, self.b.func(FuncKind.BUILTIN, name), dst, tuple(args)))
        return dst

    @staticmethod
    def reg(r: int) -> tuple[int, int]:
        return (ArgKind.REG, r)

    def cst(self, value) -> tuple[int, int]:
        return (ArgKind.CONST, self.b.const(value))

    # -- the function ----------------------------------------------------------------------

    def compile(self) -> VMFunction:
        params = self.fn.params
        for p in params:
            self.regs[id(p)] = self.new_reg()
        names = self.fn.input_names
        deferred: list = []
        for p, pub in zip(params, names):
            what = f"input {pub!r} of {self.name!r}"
            self.match(self.regs[id(p)], p.type, what, deferred)
        self.finish_match(deferred)
        arenas_at = {arena.at: a for a, arena in enumerate(self.plan.arenas)}
        for at, binding in enumerate(self.fn.bindings):
            self.at = at
            if at in arenas_at:
                self.alloc_arena(arenas_at[at], self.plan.arenas[arenas_at[at]])
            first = len(self.code)
            self.regs[id(binding.var)] = self.binding(binding)
            self.binding_code.append((first, len(self.code) - 1))
        for a, arena in enumerate(self.plan.arenas):
            self.set_lifetimes(a, arena)
        ret = self.fn.ret
        reg = self.make_tuple(ret.fields) if isinstance(ret, G.Tuple) else self.value(ret)
        self.code.append(Instr(Op.RET, reg))
        return VMFunction(self.name, len(params), self.num_regs, tuple(self.heap_names), self.code)

    def binding(self, binding: G.Binding) -> int:
        v, t = binding.value, binding.var.type
        if isinstance(v, G.CallTIR):
            return self.call_tir(v)
        if isinstance(v, (G.Var, G.Constant)):
            return self.value(v)
        if isinstance(v, G.Tuple):
            return self.make_tuple(v.fields)
        if isinstance(v, G.TupleGetItem):
            return self.builtin("tuple_get_item", self.reg(self.value(v.value)), (ArgKind.IMM, v.index))
        if isinstance(v, G.ShapeExpr):
            return self.shape_expr(v, binding.var)
        if isinstance(v, G.If):
            return self.call_if(v, binding.var)
        if isinstance(v, G.Loop):
            return self.call_loop(v, binding.var)
        if isinstance(v, G.Scan):
            return self.call_scan(v, binding.var)
        if isinstance(v, G.Call):
            x = self.reg(self.value(v.args[0]))
            if v.op == "identity":
                return self.builtin("copy", x)
            if v.op == "tensor_to_shape":
                what = f"the sizes {binding.var.name!r} in {self.name!r}"
                shape = self.builtin("tensor_to_shape", x, self.cst(what))
                self.match_dims(shape, binding.var.type, what)
                return shape
            assert isinstance(t, G.TensorType)
            shape = self.builtin("make_shape", self.cst(self.shape_program(t.shape, f"the result of {v.op}")))
            return self.builtin("reshape", x, self.reg(shape))
        kind = type(v).__name__
        raise VMCompileError(f"function {self.name!r}: {kind} is not supported by the VM yet; "
                             f"rewrite the {kind} before emitting")

    def value(self, e: G.Expr) -> int:
        if isinstance(e, G.Constant):
            if e.name not in self.constants:
                self.constants[e.name] = self.builtin("load_constant", self.cst(e.name))
            return self.constants[e.name]
        if isinstance(e, G.Var) and id(e) in self.regs:
            return self.regs[id(e)]
        raise VMCompileError(f"function {self.name!r}: operand {e!r} is not a variable or constant "
                             "bound earlier; the function must be in A-normal form")

    def make_tuple(self, fields) -> int:
        return self.builtin("make_tuple", *(self.reg(self.value(f)) for f in fields))

    def call_tir(self, v: G.CallTIR) -> int:
        args = [self.reg(self.value(a)) for a in v.args]
        out_types = v.out_type.fields if isinstance(v.out_type, G.TupleType) else (v.out_type,)
        outs = []
        for k, t in enumerate(out_types):
            if not isinstance(t, G.TensorType):
                raise VMCompileError(f"function {self.name!r}: kernel {v.func!r} has an output of "
                                     f"type {t}; kernel outputs must be tensors")
            prog = self.shape_program(t.shape, f"an output of kernel {v.func!r}")
            shape = self.builtin("make_shape", self.cst(prog))
            place = self.places.get((self.at, k))
            if place is None:
                outs.append(self.builtin("alloc_tensor", self.reg(shape), self.cst(t.dtype)))
            else:
                arena, index = place
                outs.append(self.builtin("arena_view", self.reg(self.arenas[arena][0]),
                                         (ArgKind.IMM, index), self.reg(shape), self.cst(t.dtype)))
        extra = []
        if v.shape_args:  # sizes a kernel takes may be negative (a slice's step)
            prog = self.shape_program(v.shape_args, f"the shape arguments of kernel {v.func!r}")
            extra.append(self.reg(self.builtin("make_sizes", self.cst(prog))))
        symbol = self.b.symbols.get(v.func, v.func)
        func = self.b.func(FuncKind.KERNEL, symbol)
        self.code.append(Instr(Op.CALL, func, NO_REG, tuple(args + [self.reg(o) for o in outs] + extra)))
        if isinstance(v.out_type, G.TupleType):
            return self.builtin("make_tuple", *(self.reg(o) for o in outs))
        return outs[0]

    def alloc_arena(self, a: int, arena: Arena) -> None:
        """The arena's allocation, given its tensors' byte sizes; their lifetimes are
        instruction indices, known once the function is compiled (set_lifetimes)."""
        sizes = self.shape_program([t.nbytes for t in arena.tensors], "a planned arena")
        self.arenas[a] = (self.new_reg(), len(self.code))
        func = self.b.func(FuncKind.BUILTIN, "alloc_arena")
        self.code.append(Instr(Op.CALL, func, self.arenas[a][0], (self.cst(sizes), (ArgKind.CONST, -1))))

    def set_lifetimes(self, a: int, arena: Arena) -> None:
        """Fill in an arena's lifetimes: each tensor lives from the first instruction of
        its binding to the last of the binding that last reads it (or its aliases)."""
        lifetimes: list[int] = []
        for t in arena.tensors:
            lifetimes += [self.binding_code[t.start][0], self.binding_code[t.end][1]]
        pc = self.arenas[a][1]
        ins = self.code[pc]
        self.code[pc] = Instr(ins.op, ins.a, ins.b, (ins.args[0], self.cst(tuple(lifetimes))))

    def call_if(self, v: G.If, var: G.Var) -> int:
        cond = self.builtin("read_bool", self.reg(self.value(v.cond)))
        args = tuple(self.reg(self.value(a)) for a in v.args)
        dst = self.new_reg()
        then_f = self.b.func(FuncKind.VM, v.then_branch)
        else_f = self.b.func(FuncKind.VM, v.else_branch)
        at_if = len(self.code)
        self.code.append(Instr(Op.IF, cond, 0))  # patched below
        self.code.append(Instr(Op.CALL, then_f, dst, args))
        at_goto = len(self.code)
        self.code.append(Instr(Op.GOTO, 0))
        self.code.append(Instr(Op.CALL, else_f, dst, args))
        self.code[at_if] = Instr(Op.IF, cond, at_goto + 1 - at_if)
        self.code[at_goto] = Instr(Op.GOTO, len(self.code) - at_goto)
        # a dimension the branches disagree on is a fresh variable: bind it from the result
        deferred: list = []
        self.match(dst, var.type, f"the result of if_ {var.name!r} in {self.name!r}", deferred)
        self.finish_match(deferred)
        return dst

    def shape_expr(self, v: G.ShapeExpr, var: G.Var) -> int:
        """Check the conditions, compute the shape, and bind or check the sizes its
        declared type names."""
        for cond, message in v.checks:
            prog = self.shape_program((cond,), f"a check of {var.name!r}")
            self.builtin("assert_shape", self.cst(prog), self.cst(message), result=False)
        # a shape that binds sizes: its checks said what must hold, and entries that are no
        # dimension (a slice's step) may be negative
        binds = isinstance(var.type, G.ShapeType) and var.type.dims is not None
        prog = self.cst(self.shape_program(v.dims, "a shape value"))
        shape = self.builtin("make_sizes" if binds else "make_shape", prog)
        self.match_dims(shape, var.type, f"the shape {var.name!r} in {self.name!r}")
        return shape

    def match_dims(self, reg: int, t: G.Type, what: str) -> None:
        """match_shape's binding and checks on the entries of a shape value, for a binding
        whose type is Shape((dims...))."""
        if not isinstance(t, G.ShapeType) or t.dims is None:
            return
        pattern = [t.ndim]
        for d in t.dims:
            pattern += self.plain_entry(d) or self.expr_entry(d, what)
        self.builtin("match_dims", self.reg(reg), self.cst(what),
                     self.cst(tuple(int(x) for x in pattern)), result=False)

    # -- loops -----------------------------------------------------------------------------

    def call_loop(self, v: G.Loop, var: G.Var) -> int:
        """ONNX Loop: the body gets the counter, the condition, the carried values and the
        captured ones, and returns the next condition, carried values and scan elements."""
        n, n_out = len(v.carried), self.num_outputs(v.body)
        k = n_out - 1 - n
        scalar_shape = self.builtin("make_shape", self.cst((0,)))
        if v.max_trip_count is not None:
            limit = self.value(v.max_trip_count)
        else:  # only the condition ends the loop
            limit = self.builtin("scalar", (ArgKind.IMM, INT64_MAX), self.cst("int64"))
        if v.cond is not None:  # the body takes it as a 0-d tensor, whatever its rank here
            cond = self.builtin("reshape", self.reg(self.value(v.cond)), self.reg(scalar_shape))
        else:
            cond = self.builtin("scalar", (ArgKind.IMM, 1), self.cst("bool"))
        i = self.builtin("scalar", (ArgKind.IMM, 0), self.cst("int64"))
        carried = self.loop_registers([self.value(a) for a in v.carried])
        captured = [self.value(a) for a in v.captured]
        accs = [self.builtin("stack_new") for _ in range(k)]
        ok = self.new_reg()
        body_f = self.b.func(FuncKind.VM, v.body)
        out = self.new_reg()

        def test():
            self.builtin("loop_continue", self.reg(i), self.reg(limit), self.reg(cond), dst=ok)

        def step():
            args = (i, cond, *carried, *captured)
            self.code.append(Instr(Op.CALL, body_f, out, tuple(self.reg(r) for r in args)))
            if v.cond is not None:
                self.builtin("reshape", self.reg(self.output(out, 0, n_out)),
                             self.reg(scalar_shape), dst=cond)
            for j, r in enumerate(carried):
                self.output(out, 1 + j, n_out, dst=r)
            for j, acc in enumerate(accs):
                self.builtin("stack_push", self.reg(acc), self.reg(self.output(out, 1 + n + j, n_out)),
                             result=False)
            self.builtin("scalar_add", self.reg(i), (ArgKind.IMM, 1), dst=i)

        self.emit_loop(ok, test, step)
        return self.loop_result(var, carried, accs, [(0, 0)] * k, "loop")

    def call_scan(self, v: G.Scan, var: G.Var) -> int:
        """ONNX Scan (opset 9+): one body call per slice of the scan inputs."""
        m = v.num_scan_inputs
        n, n_out = len(v.args) - m, self.num_outputs(v.body)
        k = n_out - n
        seqs = [self.value(a) for a in v.args[n:]]
        axes = []
        for a, axis in zip(v.args[n:], v.scan_input_axes):
            t = G.type_of(a)
            assert isinstance(t, G.TensorType)
            axes.append(axis % max(t.ndim, 1))
        length = self.builtin("dim_size", self.reg(seqs[0]), (ArgKind.IMM, axes[0]))
        true = self.builtin("scalar", (ArgKind.IMM, 1), self.cst("bool"))
        t_reg = self.builtin("scalar", (ArgKind.IMM, 0), self.cst("int64"))
        states = self.loop_registers([self.value(a) for a in v.args[:n]])
        captured = [self.value(a) for a in v.captured]
        accs = [self.builtin("stack_new") for _ in range(k)]
        slices = [self.new_reg() for _ in seqs]
        ok = self.new_reg()
        body_f = self.b.func(FuncKind.VM, v.body)
        out = self.new_reg()

        def test():
            self.builtin("loop_continue", self.reg(t_reg), self.reg(length), self.reg(true), dst=ok)

        def step():
            for seq, axis, rev, dst in zip(seqs, axes, v.scan_input_directions, slices):
                self.builtin("take", self.reg(seq), self.reg(t_reg), (ArgKind.IMM, axis),
                             (ArgKind.IMM, int(bool(rev))), dst=dst)
            args = (*states, *slices, *captured)
            self.code.append(Instr(Op.CALL, body_f, out, tuple(self.reg(r) for r in args)))
            for j, r in enumerate(states):
                self.output(out, j, n_out, dst=r)
            for j, acc in enumerate(accs):
                self.builtin("stack_push", self.reg(acc), self.reg(self.output(out, n + j, n_out)),
                             result=False)
            self.builtin("scalar_add", self.reg(t_reg), (ArgKind.IMM, 1), dst=t_reg)

        self.emit_loop(ok, test, step)
        stacking = list(zip(v.scan_output_axes, v.scan_output_directions))
        return self.loop_result(var, states, accs, stacking, "scan")

    def num_outputs(self, name: str) -> int:
        fn = self.b.mod.functions.get(name)
        if not isinstance(fn, G.Function):
            raise VMCompileError(f"function {self.name!r}: the loop body {name!r} is not a graph "
                                 "function of the module")
        return len(fn.outputs)

    def loop_registers(self, regs: list[int]) -> list[int]:
        """Fresh registers holding the values of `regs`, for the loop to overwrite while the
        originals stay readable after it (a tuple is the VM's only way to move values)."""
        if not regs:
            return []
        packed = self.builtin("make_tuple", *(self.reg(r) for r in regs))
        return [self.builtin("tuple_get_item", self.reg(packed), (ArgKind.IMM, j))
                for j in range(len(regs))]

    def output(self, out: int, j: int, count: int, dst: int | None = None) -> int:
        """Field `j` of a call's result `out` (the value itself when the callee returns one)."""
        if count == 1 and dst is None:
            return out
        if count == 1:  # a move, for a lone carried value
            out, j = self.builtin("make_tuple", self.reg(out)), 0
        return self.builtin("tuple_get_item", self.reg(out), (ArgKind.IMM, j), dst=dst)

    def emit_loop(self, ok: int, test, step) -> None:
        """`test; head: if ok else exit; step; test; goto head; exit:` -- the verifier
        accepts a backward goto only onto such a head."""
        test()
        head = len(self.code)
        self.code.append(Instr(Op.IF, ok, 0))  # patched below
        step()
        test()
        back = len(self.code)
        self.code.append(Instr(Op.GOTO, head - back))
        self.code[head] = Instr(Op.IF, ok, back + 1 - head)

    def loop_result(self, var: G.Var, finals: list[int], accs: list[int],
                    stacking: list[tuple[int, int]], what: str) -> int:
        """Gather the final carried values and the stacked scan outputs, then bind the fresh
        size variables of the result type (trip counts, shapes that changed in the loop)."""
        types = var.type.fields if isinstance(var.type, G.TupleType) else (var.type,)
        outs = list(finals)
        for acc, t, (axis, rev) in zip(accs, types[len(finals):], stacking):
            assert isinstance(t, G.TensorType)
            # with no iteration the result is empty: dimensions only a run would tell are 0
            dims = [d if isinstance(d, int) or all(x in self.slots for x in E.free_vars(d)) else 0
                    for d in t.shape]
            empty = self.builtin("make_shape", self.cst(self.shape_program(dims, f"a {what} output")))
            outs.append(self.builtin("stack_finish", self.reg(acc), (ArgKind.IMM, axis % t.ndim),
                                     (ArgKind.IMM, int(bool(rev))), self.reg(empty),
                                     self.cst(t.dtype)))
        result = outs[0] if len(outs) == 1 else self.builtin("make_tuple", *(self.reg(o) for o in outs))
        deferred: list = []
        self.match(result, var.type, f"the result of {what} {var.name!r} in {self.name!r}", deferred)
        self.finish_match(deferred)
        return result

    # -- shapes ----------------------------------------------------------------------------

    def slot(self, v: E.Var) -> int:
        if v not in self.slots:
            self.slots[v] = len(self.heap_names)
            self.heap_names.append(v.name)
        return self.slots[v]

    def match(self, reg: int, t: G.Type, what: str, deferred: list) -> None:
        """Check `reg` against `t`, binding the size variables it shows for the first time;
        dimensions that are expressions wait in `deferred` until every plain one is bound."""
        if isinstance(t, G.TupleType):
            for i, f in enumerate(t.fields):
                item = self.builtin("tuple_get_item", self.reg(reg), (ArgKind.IMM, i))
                self.match(item, f, f"{what}[{i}]", deferred)
            return
        if not isinstance(t, G.TensorType):
            return  # a shape value: nothing to bind
        pattern = [t.ndim]
        exprs = []
        for d in t.shape:
            entry = self.plain_entry(d)
            if entry is None:
                entry = [DimMode.ANY, 0]
                exprs.append(d)
            pattern += entry
        self.builtin("match_shape", self.reg(reg), self.cst(what), self.cst(t.dtype),
                     self.cst(tuple(int(x) for x in pattern)), result=False)
        if exprs:
            deferred.append((reg, t, what))

    def finish_match(self, deferred: list) -> None:
        for reg, t, what in deferred:
            pattern = [t.ndim]
            for d in t.shape:
                plain = isinstance(d, int) or isinstance(d, E.Var)  # matched already
                pattern += [DimMode.ANY, 0] if plain else self.expr_entry(d, what)
            self.builtin("match_shape", self.reg(reg), self.cst(what), self.cst(t.dtype),
                         self.cst(tuple(int(x) for x in pattern)), result=False)

    def plain_entry(self, d) -> list | None:
        """The pattern entry of a static or plain-variable dimension (binding a variable seen
        for the first time), or None for an expression."""
        if isinstance(d, int):
            return [DimMode.STATIC, d]
        if isinstance(d, E.Var):
            return [DimMode.CHECK if d in self.slots else DimMode.BIND, self.slot(d)]
        return None

    def expr_entry(self, d, what: str) -> list:
        """The pattern entry of an expression dimension: compared when its variables are
        bound, else unchecked (nothing binds them; a use will say so)."""
        if all(v in self.slots for v in E.free_vars(d)):
            return [DimMode.EXPR, self.b.const(self.shape_program((d,), what))]
        return [DimMode.ANY, 0]

    def shape_program(self, dims, what: str) -> tuple[int, ...]:
        """[ndim, then per dimension: word count, postfix words] (docs/vm.md)."""
        return shape_program(dims, self.slots, f"function {self.name!r}: {what}")

    def postfix(self, d, words: list[int], what: str) -> None:
        shape_postfix(d, self.slots, words, f"function {self.name!r}: {what}")


def shape_program(dims, slots: Mapping[E.Var, int], where: str) -> tuple[int, ...]:
    """The shape program of `dims`, over size variables at their `slots` ([ndim, then per
    dimension: word count, postfix words], docs/vm.md); `where` leads its errors."""
    out = [len(dims)]
    for d in dims:
        words: list[int] = []
        shape_postfix(d, slots, words, where)
        out += [len(words), *words]
    return tuple(out)


def shape_postfix(d, slots: Mapping[E.Var, int], words: list[int], where: str) -> None:
    """Append the postfix words of integer expression `d` to `words`."""
    if isinstance(d, int) or isinstance(d, E.IntImm):
        words += [ShapeOp.PUSH_INT, int(d if isinstance(d, int) else d.value)]
    elif isinstance(d, E.Var):
        if d not in slots:
            raise VMCompileError(
                f"{where} depends on size variable {d.name!r}, which no "
                "input binds; data-dependent shapes are not supported by the VM yet")
        words += [ShapeOp.PUSH_VAR, slots[d]]
    elif isinstance(d, E.BinOp) and d.op in SHAPE_BINOPS:
        shape_postfix(d.a, slots, words, where)
        shape_postfix(d.b, slots, words, where)
        words.append(SHAPE_BINOPS[d.op])
    elif isinstance(d, E.Cmp):
        a, b, op = (d.b, d.a, _SWAPPED[d.op]) if d.op in _SWAPPED else (d.a, d.b, d.op)
        shape_postfix(a, slots, words, where)
        shape_postfix(b, slots, words, where)
        words.append(SHAPE_CMPS[op])
    elif isinstance(d, E.Logic):  # on 0/1 values: and is min, or is max
        shape_postfix(d.a, slots, words, where)
        shape_postfix(d.b, slots, words, where)
        words.append(ShapeOp.MIN if d.op == "and" else ShapeOp.MAX)
    elif isinstance(d, E.Not):
        shape_postfix(d.a, slots, words, where)
        words += [ShapeOp.PUSH_INT, 0, ShapeOp.EQ]
    elif isinstance(d, E.Select):
        for part in (d.cond, d.true_value, d.false_value):
            shape_postfix(part, slots, words, where)
        words.append(ShapeOp.SELECT)
    else:
        raise VMCompileError(f"{where} has dimension {format_expr(d)}, "
                             "which the VM's shape arithmetic cannot compute")
