"""plan-memory on small hand-built legalized functions (what goes into an arena, lifetimes, the
arena a size needs, the report), compiled runs of planned functions, and the done-when check
on ResNet-50 and the BERT-style encoder: the arena within 1.2x of the lower bound, as
`tcc show --json` reports them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tcc.cli.main import cli
from tcc.cli.show_cmd import executable_memory
from tcc.emit.vm import compile_module
from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var as SizeVar
from tcc.ir.module import IRModule
from tcc.lower.passes.plan_memory import plan_memory
from tcc.rt.arena import memory_report
from tcc.rt.format import FuncKind, Op
from tcc.rt.vm import VirtualMachine
from tests.emit.test_vm_compile import Contents, FakeLibrary
from tests.models import builders
from tests.packs import compiled_pack

F32 = "float32"


def report(plan, sizes=None) -> dict:
    return memory_report(plan.arena_inputs(sizes))


def T(*shape, dtype=F32):
    return G.TensorType(tuple(shape), dtype)


def kernel(bb, name, args, t, var):
    return bb.bind(G.CallTIR(name, tuple(args), t), t, var)


def chain(n: int, t: G.TensorType) -> G.Function:
    """x -> add_one -> ... (n kernels) -> returned."""
    bb = FunctionBuilder()
    v = bb.param("x", t)
    for i in range(n):
        v = kernel(bb, "add_one", [v], t, f"v{i}")
    return bb.finish([v], ["y"])


def lifetimes(plan) -> list[tuple[int, int]]:
    return [(t.start, t.end) for a in plan.arenas for t in a.tensors]


def test_a_chain_needs_two_slots():
    plan = plan_memory(chain(6, T(8, 4)))
    (arena,) = plan.arenas
    assert arena.at == 0 and [t.nbytes for t in arena.tensors] == [128] * 5
    # an output is live where its operand dies: a kernel may read while it writes
    assert lifetimes(plan) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert report(plan) == {"tensors": 5, "arenas": 1, "allocated_bytes": 5 * 128,
                             "planned_bytes": 256, "lower_bound_bytes": 256}


def test_a_diamond_keeps_its_branches_apart():
    bb = FunctionBuilder()
    x = bb.param("x", T(16))
    a = kernel(bb, "add_one", [x], T(16), "a")
    b = kernel(bb, "add_one", [a], T(16), "b")
    c = kernel(bb, "negate", [a], T(16), "c")
    d = kernel(bb, "add", [b, c], T(16), "d")
    e = kernel(bb, "add_one", [d], T(16), "e")
    plan = plan_memory(bb.finish([e], ["y"]))
    assert lifetimes(plan) == [(0, 2), (1, 3), (2, 3), (3, 4)]
    got = report(plan)
    assert got["lower_bound_bytes"] == 3 * 64 and got["planned_bytes"] == 3 * 64


def test_returned_values_and_what_aliases_them_are_not_planned():
    bb = FunctionBuilder()
    x = bb.param("x", T(2, 3))
    a = kernel(bb, "add_one", [x], T(2, 3), "a")
    flat = bb.bind(G.Call("reshape", (a,), {"shape": [6]}), T(6), "flat")  # returned view
    parts = G.TupleType((T(2, 1), T(2, 2)))
    t = kernel(bb, "split_1_2", [x], parts, "t")
    first = bb.get_item(t, 0, "first")  # returned through a tuple: only field 0 escapes
    b = kernel(bb, "negate", [x], T(2, 3), "b")
    pair = bb.tuple([b, x], "pair")  # returned tuple holding b
    plan = plan_memory(bb.finish([flat, first, pair], ["flat", "first", "pair"]))
    assert plan.places() == {(2, 1): (0, 0)}
    assert report(plan)["allocated_bytes"] == 2 * 2 * 4


def test_a_view_extends_its_buffers_lifetime():
    bb = FunctionBuilder()
    x = bb.param("x", T(4, 4))
    a = kernel(bb, "add_one", [x], T(4, 4), "a")
    view = bb.bind(G.Call("reshape", (a,), {"shape": [16]}), T(16), "view")
    b = kernel(bb, "negate", [x], T(4, 4), "b")
    c = kernel(bb, "add_one", [b], T(4, 4), "c")
    d = kernel(bb, "concat", [view, c], T(32), "d")
    plan = plan_memory(bb.finish([d], ["y"]))
    assert lifetimes(plan) == [(0, 4), (2, 3), (3, 4)]  # a lives as long as its view
    assert report(plan)["lower_bound_bytes"] == 3 * 64


def test_control_flow_results_may_be_their_arguments():
    """An If hands back whatever its branch returns, possibly its argument: a returned If
    result keeps its arguments unplanned; the bodies are planned as their own functions."""
    mod = IRModule()
    for name in ("then_f", "else_f"):
        bb = FunctionBuilder()
        p = bb.param("p", T(8))
        mod.functions[name] = bb.finish([p], ["r"])
    bb = FunctionBuilder()
    c = bb.param("c", T(dtype="bool"))
    x = bb.param("x", T(8))
    a = kernel(bb, "add_one", [x], T(8), "a")
    e = G.If(c, "then_f", "else_f", (a,))
    r = bb.bind(e, G.infer_control_flow(e, mod.functions), "r")
    assert plan_memory(bb.finish([r], ["r"])).arenas == ()


def test_symbolic_sizes_are_reported_at_given_sizes():
    n, m = SizeVar("n"), SizeVar("m")
    bb = FunctionBuilder()
    x = bb.param("x", T(n, 4))
    y = bb.param("y", T(m, 4))
    a = kernel(bb, "add_one", [x], T(n, 4), "a")
    b = kernel(bb, "add_one", [a], T(n, 4), "b")
    c = kernel(bb, "dup", [b], T(n * 2, 4), "c")
    d = kernel(bb, "add_one", [y], T(m, 4), "d")
    e = kernel(bb, "concat", [c, d], T(n * 2 + m, 4), "e")
    plan = plan_memory(bb.finish([e], ["y"]))
    assert report(plan)["planned_bytes"] is None
    assert report(plan, {"n": 5})["planned_bytes"] is None  # m has no value
    # a(80) b(80) c(160) d(112) at n=5, m=7: c and d are live together, a dies where c is born
    assert report(plan, {"n": 5, "m": 7}) == {
        "tensors": 4, "arenas": 1, "allocated_bytes": 80 + 80 + 160 + 112,
        "planned_bytes": 192 + 128, "lower_bound_bytes": 160 + 112}


def if_then_more_module() -> IRModule:
    """main(c, x[n,4]): r = x + 1 if c else concat(x, x), then two kernels on r, whose row
    count is a variable the If result binds."""
    mod = IRModule()
    n, k = SizeVar("n"), SizeVar("k")
    bb = FunctionBuilder()
    p = bb.param("p", T(k, 4))
    mod.functions["then_f"] = bb.finish([kernel(bb, "add_one", [p], T(k, 4), "r")], ["r"])
    bb = FunctionBuilder()
    p = bb.param("p", T(k, 4))
    mod.functions["else_f"] = bb.finish([kernel(bb, "concat_rows", [p, p], T(k * 2, 4), "r")], ["r"])
    bb = FunctionBuilder()
    c = bb.param("c", T(dtype="bool"))
    x = bb.param("x", T(n, 4))
    a = kernel(bb, "negate", [x], T(n, 4), "a")
    e = G.If(c, "then_f", "else_f", (a,))
    r = bb.bind(e, G.infer_control_flow(e, mod.functions), "r")
    rows = G.type_of(r).shape[0]
    s = kernel(bb, "add_one", [r], T(rows, 4), "s")
    out = kernel(bb, "negate", [s], T(rows, 4), "out")
    mod.functions["main"] = bb.finish([out], ["out"])
    return mod


def test_sizes_an_if_result_binds_go_into_a_later_arena():
    mod = if_then_more_module()
    plan = plan_memory(mod.functions["main"])
    assert [(a.at, [t.binding for t in a.tensors]) for a in plan.arenas] == [(0, [0]), (2, [2])]
    exe = compile_module(mod)
    main = exe.function("main")
    calls = [exe.table[i.a][1] for i in main.code if i.op == Op.CALL]
    assert calls.count("alloc_arena") == 2 and calls.count("arena_view") == 2
    vm = VirtualMachine(Contents(exe), FakeLibrary())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(vm.run("main", [np.array(True), x])[0], -(-x + 1 + 1))
    np.testing.assert_array_equal(vm.run("main", [np.array(False), x])[0],
                                  -(np.concatenate([-x, -x]) + 1))


def test_lifetimes_in_the_bytecode_are_instruction_ranges():
    """Each planned tensor lives from the first instruction of the binding writing it to the
    kernel call that last reads it; the input function stays as it was and the planned
    chain computes what an unplanned one does."""
    n = SizeVar("n")
    fn = chain(5, T(n, 3))
    before = [(b.var, b.value) for b in fn.bindings]
    mod = IRModule()
    mod.functions["main"] = fn
    exe = compile_module(mod)
    assert [(b.var, b.value) for b in fn.bindings] == before
    main = exe.function("main")
    arena_pc, arena_ins = next((pc, i) for pc, i in enumerate(main.code)
                               if i.op == Op.CALL and exe.table[i.a] == (FuncKind.BUILTIN, "alloc_arena"))
    spans = exe.constants[arena_ins.args[1][1]]
    views = [(pc, i.b) for pc, i in enumerate(main.code)
             if i.op == Op.CALL and exe.table[i.a][1] == "arena_view"]
    assert len(spans) == 2 * len(views) == 8
    for k, (pc, reg) in enumerate(views):
        start, end = spans[2 * k], spans[2 * k + 1]
        assert arena_pc < start <= pc  # born at its binding, which makes the view
        reader = main.code[end]  # the next add_one reads it there
        assert exe.table[reader.a][0] == FuncKind.KERNEL and (0, reg) == reader.args[0]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (y,) = VirtualMachine(Contents(exe), FakeLibrary()).run("main", [x])
    np.testing.assert_array_equal(y, x + 5)
    unplanned = compile_module(mod, plan=False)
    assert [unplanned.table[i.a][1] for i in unplanned.function("main").code
            if i.op == Op.CALL].count("alloc_tensor") == 5
    assert executable_memory(exe, {"n": 4}) == {"main": report(plan_memory(fn), {"n": 4})}


@pytest.mark.parametrize(("builder", "sizes"), [
    ("resnet50", []),
    ("bert_encoder", ["--size", "batch=4", "--size", "seq=128"]),
])
def test_planned_peak_within_1_2x_of_the_lower_bound(builder, sizes, tmp_path):
    model = (getattr(builders, builder)() if builder == "bert_encoder"
             else builders.light_model(builder))
    pack = compiled_pack(model)
    r = CliRunner().invoke(cli, ["show", str(pack), "--json", *sizes])
    assert r.exit_code == 0, r.output
    memory = json.loads(r.output)["memory"]["main"]
    planned, bound = memory["planned_bytes"], memory["lower_bound_bytes"]
    assert isinstance(planned, int) and isinstance(bound, int)
    assert bound <= planned <= 1.2 * bound
    assert planned < memory["allocated_bytes"] / 3  # what each output on its own takes


def test_tcc_compile_plans_memory_unless_told_not_to(tmp_path):
    from tests.runtime_c.test_vm import planned_model

    source = tmp_path / "m.onnx"
    source.write_bytes(planned_model().SerializeToString())
    memory = {}
    for flags in ([], ["--no-plan-memory"]):
        pack = tmp_path / f"m{len(flags)}.tvmpack"
        r = CliRunner().invoke(cli, ["compile", str(source), "-o", str(pack), *flags])
        assert r.exit_code == 0, r.output
        shown = CliRunner().invoke(cli, ["show", str(pack), "--json", "--size", "b=3"])
        memory[bool(flags)] = json.loads(shown.output)["memory"]
    assert memory[True] == {}
    assert memory[False] == {"main": {"tensors": 1, "arenas": 1, "allocated_bytes": 60,
                                      "planned_bytes": 64, "lower_bound_bytes": 60}}
