"""The C runtime's VM (runtime_c/src/vm.c) against the Python one (tcc.rt): the same pack,
the same inputs, bitwise the same outputs; the same one-line messages for wrong inputs.
Runs in-process through the library (tests/runtime_c/capi.py)."""

from __future__ import annotations

import gc
import os
import shutil
import signal

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import tcc
import tcc.rt
from tcc.rt.errors import RunInputError
from tests.emit.test_vm_loops import onnx_loop_model
from tests.runtime_c.capi import CRuntime, CRuntimeError, build_runtime

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make"
)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return build_runtime(tmp_path_factory.mktemp("tccrt-vm"))


@pytest.fixture(scope="module")
def crt(build) -> CRuntime:
    return CRuntime(build / "libtccrt.so")


def vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def if_model():
    """y = x * 2 when sum(x) > 0 else x - 1, over a symbolic batch."""
    then = h.make_graph([h.make_node("Add", ["x", "x"], ["t"])], "then", [],
                        [vi("t", TP.FLOAT, ["n", 3])])
    other = h.make_graph([h.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                         [vi("e", TP.FLOAT, ["n", 3])])
    return model(
        [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         h.make_node("Greater", ["s", "zero"], ["c"]),
         h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [vi("x", TP.FLOAT, ["n", 3])], [vi("y", TP.FLOAT, ["n", 3])],
        [h.make_tensor("zero", TP.FLOAT, [], [0.0]), h.make_tensor("one", TP.FLOAT, [], [1.0])],
    )


def scan_model():
    """A running sum over the rows of x (Scan, opset 9+), with the partial sums stacked."""
    body = h.make_graph(
        [h.make_node("Add", ["s_in", "row"], ["s_out"]),
         h.make_node("Identity", ["s_out"], ["scan_out"])],
        "body", [vi("s_in", TP.FLOAT, [4]), vi("row", TP.FLOAT, [4])],
        [vi("s_out", TP.FLOAT, [4]), vi("scan_out", TP.FLOAT, [4])])
    return model(
        [h.make_node("Scan", ["s0", "x"], ["s", "partial"], body=body, num_scan_inputs=1,
                     scan_input_directions=[1])],
        [vi("s0", TP.FLOAT, [4]), vi("x", TP.FLOAT, ["t", 4])],
        [vi("s", TP.FLOAT, [4]), vi("partial", TP.FLOAT, ["t", 4])])


def mlp_model():
    rng = np.random.default_rng(0)
    w = h.make_tensor("w", TP.FLOAT, [4, 5], rng.standard_normal(20).astype(np.float32))
    return model(
        [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
         h.make_node("Reshape", ["r", "shape"], ["y"]), h.make_node("Identity", ["w"], ["wc"])],
        [vi("x", TP.FLOAT, ["b", 4])], [vi("y", TP.FLOAT, ["b", 5, 1]), vi("wc", TP.FLOAT, [4, 5])],
        [w, h.make_tensor("shape", TP.INT64, [3], [-1, 5, 1])])


def planned_model():
    """y = m + sum(m) per row, m = x @ w: m feeds two kernels, so it is an intermediate
    tensor of its own (in an arena), not fused away."""
    rng = np.random.default_rng(0)
    w = h.make_tensor("w", TP.FLOAT, [4, 5], rng.standard_normal(20).astype(np.float32))
    return model(
        [h.make_node("MatMul", ["x", "w"], ["m"]),
         h.make_node("ReduceSum", ["m", "axes"], ["s"], keepdims=1),
         h.make_node("Add", ["m", "s"], ["y"])],
        [vi("x", TP.FLOAT, ["b", 4])], [vi("y", TP.FLOAT, ["b", 5])],
        [w, h.make_tensor("axes", TP.INT64, [1], [1])])


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("vm-packs")
    for name, m in [("if", if_model()), ("loop", onnx_loop_model()), ("scan", scan_model()),
                    ("mlp", mlp_model()), ("planned", planned_model())]:
        out[name] = d / f"{name}.tvmpack"
        tcc.compile(m, output=out[name])
    return out


def assert_same(c_outs, py_outs):
    assert len(c_outs) == len(py_outs)
    for c, p in zip(c_outs, py_outs):
        assert c.dtype == p.dtype and c.shape == p.shape
        assert c.tobytes() == p.tobytes()


def both(crt, path, inputs):
    py = tcc.rt.load(path)["main"](*inputs)
    c = crt.load(path).run("main", inputs)
    assert_same(c, py)
    return c


RNG = np.random.default_rng(1)


@pytest.mark.parametrize("rows, sign", [(1, 1.0), (3, -1.0), (0, 1.0)])
def test_if_branches(crt, packs, rows, sign):
    x = (sign * np.abs(RNG.standard_normal((rows, 3)))).astype(np.float32)
    both(crt, packs["if"], [x])


@pytest.mark.parametrize("trips, cond", [(2, True), (9, True), (0, True), (3, False)])
def test_loop_with_carried_growing_and_scan_outputs(crt, packs, trips, cond):
    inputs = [np.array(trips, np.int64), np.array(cond), RNG.standard_normal(3).astype(np.float32),
              RNG.standard_normal((1, 3)).astype(np.float32),
              RNG.standard_normal((6, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)]
    both(crt, packs["loop"], inputs)


@pytest.mark.parametrize("t", [0, 1, 5])
def test_scan_in_reverse(crt, packs, t):
    outs = both(crt, packs["scan"], [np.zeros(4, np.float32), RNG.standard_normal((t, 4)).astype(np.float32)])
    assert outs[1].shape == (t, 4)


def test_views_and_weight_outputs_are_owned_copies(crt, packs):
    outs = both(crt, packs["mlp"], [RNG.standard_normal((3, 4)).astype(np.float32)])
    assert outs[0].shape == (3, 5, 1) and outs[1].shape == (4, 5)


def test_a_module_hands_out_its_weights_run_after_run(crt, packs):
    """A module makes each weight's tensor once and every load_constant shares it; sharing
    must not change what a run gives: a weight returned as an output stays the same over
    runs and modules, and outlives its module (a reference dropped too often would show
    here, as freed memory)."""
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    first = crt.load(packs["mlp"])
    want = first.run("main", [x])[1]
    for _ in range(3):
        np.testing.assert_array_equal(first.run("main", [x])[1], want)
    second = crt.load(packs["mlp"])
    del first
    gc.collect()
    np.testing.assert_array_equal(second.run("main", [x])[1], want)


@pytest.mark.parametrize("bad", [
    np.zeros((2, 4), np.float64),  # dtype
    np.zeros((2, 4, 1), np.float32),  # rank
    np.zeros((2, 3), np.float32),  # a static dimension
])
def test_wrong_inputs_give_the_python_runtimes_message(crt, packs, bad):
    with pytest.raises(RunInputError) as py:
        tcc.rt.load(packs["mlp"])["main"](bad)
    with pytest.raises(CRuntimeError) as c:
        crt.load(packs["mlp"]).run("main", [bad])
    assert c.value.status == "invalid input"
    assert c.value.message == str(py.value)


def test_wrong_input_count_and_unknown_function(crt, packs):
    m = crt.load(packs["mlp"])
    with pytest.raises(CRuntimeError, match=r"'main' takes 1 inputs \(x\), got 2"):
        m.run("main", [np.zeros((1, 4), np.float32)] * 2, 2)
    with pytest.raises(CRuntimeError, match="no entry function 'nope'"):
        m.run("nope", [], 1)


def test_symbolic_dims_checked_across_inputs(crt, tmp_path):
    """Two inputs sharing a size variable: the second must agree with the first."""
    path = tmp_path / "add.tvmpack"
    tcc.compile(model([h.make_node("Add", ["a", "b"], ["y"])],
                      [vi("a", TP.FLOAT, ["n", 2]), vi("b", TP.FLOAT, ["n", 2])],
                      [vi("y", TP.FLOAT, ["n", 2])]), output=path)
    a, b = np.ones((3, 2), np.float32), np.ones((4, 2), np.float32)
    with pytest.raises(RunInputError) as py:
        tcc.rt.load(path)["main"](a, b)
    with pytest.raises(CRuntimeError) as c:
        crt.load(path).run("main", [a, b])
    assert c.value.message == str(py.value)
    both(crt, path, [a, a])


def test_thread_count(crt, packs, monkeypatch):
    m = crt.load(packs["mlp"])
    m.set_num_threads(1)
    x = RNG.standard_normal((64, 4)).astype(np.float32)
    one = m.run("main", [x])
    m.set_num_threads(2)
    assert_same(m.run("main", [x]), one)
    with pytest.raises(CRuntimeError, match="0 \\(the default\\) or positive"):
        m.set_num_threads(-1)
    monkeypatch.setenv("TCC_NUM_THREADS", "many")
    with pytest.raises(CRuntimeError, match="TCC_NUM_THREADS must be a positive integer"):
        crt.load(packs["mlp"])


# -- memory planning --------------------------------------------------------------------------


def model_inputs(name, model):
    from tests.e2e.test_models import token_inputs

    if name in ("bert_encoder", "gpt2_decoder"):
        wanted = [vi.name for vi in model.graph.input]
        feeds = token_inputs(np.random.default_rng(2), 2, 24, vocab=100)
        return [feeds[n] for n in wanted]
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    return [np.random.default_rng(2).standard_normal(shape, dtype=np.float32)]


def _calls(path, builtin: str) -> int:
    with tcc.rt.pack.read_pack(path) as contents:
        exe = contents.executable
        return sum(1 for f in exe.functions for ins in f.code
                   if ins.op == 1 and exe.table[ins.a] == (1, builtin))


@pytest.fixture(scope="module")
def planning_packs(tmp_path_factory):
    """`planning_packs(name)` -> (model, planned pack, unplanned pack), made on first use; the
    kernels do not depend on memory planning, so they are compiled once for both."""
    import tcc.emit.llvm
    from tcc.api import compile_to_bytes
    from tests.models import builders

    directory, cache = tmp_path_factory.mktemp("planning"), {}
    real = tcc.emit.llvm.compile_prim_funcs

    def get(name: str):
        if name not in cache:
            model = getattr(builders, name)() if name != "squeezenet" else builders.light_model(name)
            planned, unplanned = directory / f"{name}.tvmpack", directory / f"{name}.off.tvmpack"
            kernels: list = []

            def compile_once(prim_funcs, target):
                if not kernels:
                    kernels.append(real(prim_funcs, target))
                return kernels[0]

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(tcc.emit.llvm, "compile_prim_funcs", compile_once)
                planned.write_bytes(compile_to_bytes(model))
                unplanned.write_bytes(compile_to_bytes(model, plan_memory=False))
            cache[name] = (model, planned, unplanned)
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["bert_encoder", "gpt2_decoder", "squeezenet"])
def test_memory_planning_keeps_outputs_bitwise(crt, planning_packs, name):
    """The same kernels write into arenas instead of fresh buffers: the outputs of the
    planned pack equal the unplanned pack's bit for bit, in both runtimes, and on a second
    run (the arena plan remembered)."""
    model, planned, unplanned = planning_packs(name)
    assert _calls(planned, "alloc_arena") == 1 and _calls(unplanned, "alloc_arena") == 0
    inputs = model_inputs(name, model)
    want = both(crt, unplanned, inputs)
    assert_same(both(crt, planned, inputs), want)
    assert_same(crt.load(planned).run("main", inputs), want)


def test_tccrt_info_reports_the_memory_plan_as_tcc_show(build, planning_packs):
    """Both compute the report from the bytecode, each with its own arena planner."""
    import json
    import subprocess

    from click.testing import CliRunner

    from tcc.cli.main import cli

    _, pack, _ = planning_packs("squeezenet")
    info = subprocess.run([build / "tccrt", "info", "--json", pack], capture_output=True, text=True)
    shown = CliRunner().invoke(cli, ["show", str(pack), "--json"], catch_exceptions=False)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout) == json.loads(shown.output)
    memory = json.loads(shown.output)["memory"]["main"]
    assert memory["lower_bound_bytes"] <= memory["planned_bytes"] < memory["allocated_bytes"]


PLAN_HOOK = r"""
/* Reads sets of tensors ("n, then n sizes, then n [start end] pairs", until EOF) and prints
 * each set's offsets and arena size as tccrt_plan_arena places them. */
#include <stdio.h>
#include <stdlib.h>
#include "value.h"

int main(void) {
  size_t n;
  while (scanf("%zu", &n) == 1) {
    int64_t *sizes = malloc((n + 1) * sizeof *sizes), *lifetimes = malloc((2 * n + 1) * sizeof *sizes);
    int64_t *offsets = malloc((n + 1) * sizeof *sizes), total;
    for (size_t i = 0; i < n; i++) if (scanf("%lld", (long long *)&sizes[i]) != 1) return 2;
    for (size_t i = 0; i < 2 * n; i++) if (scanf("%lld", (long long *)&lifetimes[i]) != 1) return 2;
    if (tccrt_plan_arena(n, sizes, lifetimes, offsets, &total)) return 3;
    for (size_t i = 0; i < n; i++) printf("%lld ", (long long)offsets[i]);
    printf("%lld\n", (long long)total);
    free(sizes);
    free(lifetimes);
    free(offsets);
  }
  return 0;
}
"""


def random_tensor_sets(count: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(0, 40))
        sizes = rng.choice([0, 1, 64, 100, 4096, 4097, int(rng.integers(1, 1 << 20))], n)
        starts = rng.integers(0, 60, n)
        yield [int(s) for s in sizes], [(int(s), int(s + k)) for s, k in zip(starts, rng.integers(0, 15, n))]


def test_the_c_planner_places_every_tensor_where_the_python_one_does(tmp_path):
    """tccrt_plan_arena against tcc.rt.arena.plan_arena on random sets, through a small C
    program linked with the runtime (built with the sanitizers where the compiler has them)."""
    import subprocess

    from tcc.rt.arena import plan_arena
    from tests.runtime_c.capi import RUNTIME
    from tests.runtime_c.test_reader import _sanitizers_work

    flags = "-fsanitize=address,undefined -fno-sanitize-recover=all" if _sanitizers_work(tmp_path) else ""
    build = build_runtime(tmp_path / "build", flags)
    (tmp_path / "hook.c").write_text(PLAN_HOOK)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *flags.split(), f"-I{RUNTIME / 'include'}",
                    f"-I{RUNTIME / 'src'}", str(tmp_path / "hook.c"), str(build / "libtccrt.a"), "-ldl",
                    "-lpthread", "-o", str(tmp_path / "hook")], check=True, capture_output=True, text=True)
    sets = list(random_tensor_sets(300, seed=5))
    text = "".join(f"{len(sizes)} {' '.join(map(str, sizes))} {' '.join(f'{s} {e}' for s, e in lts)}\n"
                   for sizes, lts in sets)
    r = subprocess.run([str(tmp_path / "hook")], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(sets)
    for (sizes, lts), line in zip(sets, lines):
        plan = plan_arena(sizes, lts)
        assert [int(w) for w in line.split()] == [*plan.offsets, plan.size], (sizes, lts)


def _planned_call(exe, callee: str):
    """(pc, instr) of the first call of builtin `callee` in main."""
    main = exe.function("main")
    pc = next(pc for pc, i in enumerate(main.code) if i.op == 1 and exe.table[i.a][1] == callee)
    return main, pc


def _edit_arg(callee: str, position: int, make_arg):
    """An executable edit: argument `position` of main's first `callee` call becomes
    make_arg(exe)."""
    from tcc.rt.format import Instr

    def edit(exe):
        main, pc = _planned_call(exe, callee)
        ins = main.code[pc]
        args = list(ins.args)
        args[position] = make_arg(exe)
        main.code[pc] = Instr(ins.op, ins.a, ins.b, tuple(args))
    return edit


def _new_const(value):
    def make(exe):
        exe.constants.append(value)
        return (2, len(exe.constants) - 1)
    return make


LOAD_REFUSALS = {  # the planned pack's arena holds one tensor (the matmul's output)
    "sizes not a program": (_edit_arg("alloc_arena", 0, _new_const((1, 3, 0, 8))),
                            "alloc_arena", "shape program runs past its end"),
    "lifetimes for another count": (_edit_arg("alloc_arena", 0, _new_const((2, 2, 0, 8, 2, 0, 8))),
                                    "alloc_arena", "arena lifetimes have 2 words for 2 tensors"),
    "lifetime ends before it starts": (_edit_arg("alloc_arena", 1, _new_const((5, 3))), "alloc_arena",
                                       "arena tensor 0 has lifetime [5, 3], which ends before it starts"),
    "lifetime leaves the function": (_edit_arg("alloc_arena", 1, _new_const((2, 999))), "alloc_arena",
                                     "arena tensor 0 has lifetime [2, 999], outside the function's "
                                     "{code} instructions"),
    "lifetimes a string": (_edit_arg("alloc_arena", 1, _new_const("x")),
                           "alloc_arena", "builtin alloc_arena has a constant of the wrong kind"),
    "view index negative": (_edit_arg("arena_view", 1, lambda e: (1, -1)),
                            "arena_view", "arena tensor index -1 is negative"),
    "view dtype unknown": (_edit_arg("arena_view", 3, _new_const("float128")),
                           "arena_view", "unknown dtype"),
    "view arena an immediate": (_edit_arg("arena_view", 0, lambda e: (1, 0)),
                                "arena_view", "builtin arena_view has an argument of the wrong kind"),
}


@pytest.mark.parametrize("case", sorted(LOAD_REFUSALS))
def test_planning_builtins_are_verified_alike_at_load(crt, packs, tmp_path, case):
    from tests.runtime_c.test_verify import forge, python_message

    edit, callee, message = LOAD_REFUSALS[case]
    with tcc.rt.pack.read_pack(packs["planned"]) as contents:
        main, pc = _planned_call(contents.executable, callee)
    path = tmp_path / "bad.tvmpack"
    path.write_bytes(forge(packs["planned"].read_bytes(), edit))
    want = f"{path}: bytecode function 'main' at {pc}: {message.format(code=len(main.code))}"
    assert python_message(path) == want
    with pytest.raises(CRuntimeError) as e:
        crt.load(path)
    assert e.value.status == "invalid pack" and e.value.message == want


RUN_REFUSALS = {  # edit, the C runtime's message, the Python runtime's
    "slot too small": (_edit_arg("alloc_arena", 0, _new_const((1, 2, 0, 4))),
                       "views a float32[3, 5] tensor in a slot of 4 bytes", None),
    "index past the arena": (_edit_arg("arena_view", 1, lambda e: (1, 1)),
                             "views tensor 1 of an arena of 1", None),
    "view of a tensor": (_edit_arg("arena_view", 0, lambda e: (0, 0)),  # the input's register
                         "argument 0 of arena_view is a tensor, not an arena",
                         "makes an arena view of something that is not an arena"),
}


@pytest.mark.parametrize("case", sorted(RUN_REFUSALS))
def test_planning_builtins_refuse_a_bad_pack_at_run(crt, packs, tmp_path, case):
    from tcc.rt.errors import PackError
    from tests.runtime_c.test_verify import forge

    edit, c_says, py_says = RUN_REFUSALS[case]
    path = tmp_path / "bad.tvmpack"
    path.write_bytes(forge(packs["planned"].read_bytes(), edit))
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(PackError) as py:
        tcc.rt.load(path)["main"](x)
    assert (py_says or c_says) in str(py.value)
    with pytest.raises(CRuntimeError) as e:
        crt.load(path).run("main", [x])
    assert e.value.status == "invalid pack" and c_says in e.value.message


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_kernels_run_in_a_forked_child(crt, tmp_path):
    """libgomp cannot restart its threads in a forked child: the runtime's atfork handler
    makes the child's kernels single-threaded, so they run instead of waiting forever."""
    path = tmp_path / "relu.tvmpack"
    tcc.compile(model([h.make_node("Relu", ["x"], ["y"])], [vi("x", TP.FLOAT, [256, 1024])],
                      [vi("y", TP.FLOAT, [256, 1024])]), output=path)
    m = crt.load(path)
    m.set_num_threads(2)
    x = RNG.standard_normal((256, 1024)).astype(np.float32)
    (want,) = m.run("main", [x])
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        ok = False
        try:
            ok = np.array_equal(m.run("main", [x])[0], want)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
