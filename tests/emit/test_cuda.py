"""The CUDA code generator: the kernels of real models translate and compile with NVRTC for
sm_80 and sm_90 (no GPU needed), the source is deterministic, what it cannot translate is a
one-line error, and the generated code computes what the reference evaluator does (run on
this CPU through a C++ shim)."""


import re

import numpy as np
import pytest

from tcc.api import load_module, lower
from tcc.emit.cuda import CudaCodegenError, compile_cuda_module, cuda_kernels
from tcc.emit.nvrtc import nvrtc_available
from tcc.ir import tir as T
from tcc.ir.printer import print_prim_func
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.passes import run_pipeline
from tcc.lower.rules import schedule_prim_func
from tcc.target import parse_target
from tests.emit import cuda_on_host
from tests.lower.rules.cpu.rules_cases import _model, kernels, random_arguments
from tests.models.builders import bert_encoder, gpt2_decoder, light_model

CUDA = parse_target("cuda -arch=sm_80,sm_90")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed (pip install 'tcc[cuda]')")
needs_cxx = pytest.mark.skipif(cuda_on_host.cxx() is None, reason="no C++ compiler to run CUDA C on the host")

MODELS = {"bert": bert_encoder, "gpt2": gpt2_decoder,
          **{n: (lambda n=n: light_model(n)) for n in ("squeezenet", "shufflenet", "resnet50")}}


def _lowered(model):
    return lower(run_pipeline(load_module(model), target=CUDA))


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_kernel_of_the_model_set_compiles_for_sm80_and_sm90(name):
    mod = _lowered(MODELS[name]())
    built = compile_cuda_module(mod.prim_funcs, CUDA)
    assert sorted(built.binaries) == ["compute_90.ptx", "sm_80", "sm_90"]
    for arch in ("sm_80", "sm_90"):
        cubin = built.binaries[arch]
        assert cubin[:4] == b"\x7fELF" and int.from_bytes(cubin[18:20], "little") == 190  # EM_CUDA
    assert set(built.kernels) == set(mod.prim_funcs)
    ptx = built.binaries["compute_90.ptx"].decode()
    for kernel in built.kernels.values():
        for launch in kernel.launches:
            assert f".visible .entry {launch.symbol}(" in ptx


def test_the_source_is_the_same_every_time():
    funcs = {n: schedule_prim_func(f, CUDA) for n, f in _lowered(bert_encoder()).prim_funcs.items()}
    first, _ = cuda_kernels(funcs)
    again, _ = cuda_kernels({n: funcs[n] for n in reversed(list(funcs))})
    assert first == again


def test_a_parallel_loop_is_a_one_line_error():
    (func,) = kernels("add_broadcast").values()
    from tcc.lower.rules.cpu import Machine

    cpu = schedule_prim_func(func, Machine(cores=2))
    assert any(isinstance(s, T.For) and s.kind is T.ForKind.PARALLEL for s in _loops(cpu.body))
    with pytest.raises(CudaCodegenError, match="parallel, a CPU loop kind; bind it to blockIdx"):
        cuda_kernels({"k": cpu})


def test_a_float16_kernel_needs_no_header_unless_it_uses_half():
    funcs = {n: schedule_prim_func(f, CUDA) for n, f in kernels("add_broadcast").items()}
    source, _ = cuda_kernels(funcs)
    assert "cuda_fp16.h" not in source


def _loops(s):
    if isinstance(s, T.For):
        yield s
        yield from _loops(s.body)
    elif isinstance(s, T.SeqStmt):
        for c in s.stmts:
            yield from _loops(c)
    elif isinstance(s, T.Block):
        yield from _loops(s.body)
    elif isinstance(s, T.IfThenElse):
        yield from _loops(s.then_case)
        if s.else_case is not None:
            yield from _loops(s.else_case)
    elif isinstance(s, T.Allocate):
        yield from _loops(s.body)


@needs_cxx
@pytest.mark.parametrize("case", ["add_broadcast", "transpose", "conv_depthwise", "max_pool",
                                  "avg_pool", "reduce_mean", "softmax", "layer_norm"])
def test_the_generated_code_computes_what_the_kernel_means(case, tmp_path):
    """Each launch's blocks and threads run one after another on this CPU: the GPU's result
    for thread-per-output schedules, whose threads share nothing. (Kernels whose threads
    share memory behind barriers, such as reduce_max_all's, the tiled matmuls and
    convolutions, run through the stand-in driver in tests/rt/test_cuda.py.)"""
    funcs = kernels(case)
    scheduled = {n: schedule_prim_func(f, CUDA) for n, f in funcs.items()}
    source, cuda = cuda_kernels(scheduled)
    lib = cuda_on_host.build(source, tmp_path)
    for name, func in funcs.items():
        args = random_arguments(func, seed=3)
        want, got = [a.copy() for a in args], [a.copy() for a in args]
        run_prim_func(func, want)
        cuda_on_host.run(lib, cuda[name], got)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)




@needs_cxx
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_abs_wraps_at_the_minimum_as_the_cpu_backend_does(dtype, tmp_path):
    """T5's relative-position buckets take the abs of int64 distances (the corpus export
    failed to translate before)."""
    from tcc.ir import expr as E
    from tcc.ir import te

    a = te.placeholder((8,), dtype, "A")
    b = te.compute((8,), lambda i: E.Call("abs", (a[i],), dtype), name="B")
    func = schedule_prim_func(te.create_prim_func([a, b]), CUDA)
    source, cuda = cuda_kernels({"k": func})
    lib = cuda_on_host.build(source, tmp_path)
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -5, -1, 0, 1, 7, info.max], dtype)
    out = np.zeros_like(x)
    cuda_on_host.run(lib, cuda["k"], [x, out])
    np.testing.assert_array_equal(out, np.abs(x))  # numpy wraps too: abs(min) == min


@needs_cxx
def test_size_arithmetic_is_computed_once_and_a_guarded_division_stays_guarded(tmp_path):
    """Integer expressions of the size variables alone are named once at the top of a launch
    (a dynamic export's shape arithmetic, min and max of the same sizes nested many levels,
    printed as a tree was half a megabyte of one BERT kernel); a division by a size stays
    where its guard is, so m = 0 does not divide by zero."""
    from tcc.ir import expr as E
    from tcc.ir import te

    n, m = E.Var("n"), E.Var("m")
    a = te.placeholder((m,), "int64", "A")
    size = n
    for _ in range(5):  # C's min and max name each operand twice: 6**5 copies as text
        # (size + 1, so that absorption, max(a, min(a, b)) == a, leaves the tree as it is)
        size = E.binop("max", size, E.binop("min", E.binop("add", size, 1), 256))
    quotient = E.select(E.Cmp("ne", m, E.IntImm(0)), E.binop("floordiv", n, m), E.IntImm(0))
    b = te.compute((n,), lambda i: E.binop("add", E.binop("add", size, quotient), i), name="B")
    func = schedule_prim_func(te.create_prim_func([a, b]), CUDA)
    source, cuda = cuda_kernels({"k": func})
    assert len(source) < 8000
    assert "const long long s" in source
    lib = cuda_on_host.build(source, tmp_path)
    for m_size, n_size in ((0, 5), (3, 300)):
        out = np.zeros(n_size, np.int64)
        cuda_on_host.run(lib, cuda["k"], [np.zeros(m_size, np.int64), out])
        q = n_size // m_size if m_size else 0
        want = n_size
        for _ in range(5):
            want = max(want, min(want + 1, 256))
        np.testing.assert_array_equal(out, want + q + np.arange(n_size))


@needs_cxx
def test_a_repeated_value_is_named_once_unless_only_a_guarded_branch_reads_it(tmp_path):
    """out[i] = x[idx[i]] * 2 + x[idx[i]] where idx[i] >= 0, else 0: idx[i], read by the
    condition, is named once before the store; x[idx[i]], read only where the condition
    holds, stays inside the branch, so a negative index is never read (a read of
    x[-10**12] would fault)."""
    from tcc.ir import expr as E
    from tcc.ir import te

    x = te.placeholder((16,), "float32", "x")
    idx = te.placeholder((8,), "int64", "idx")

    def body(i):
        def gathered():  # a fresh copy each time, as inlining makes them
            return x[idx[i]]
        value = E.binop("add", E.binop("mul", gathered(), E.FloatImm(2.0, "float32")), gathered())
        return E.select(E.Cmp("ge", idx[i], E.IntImm(0)), value, E.FloatImm(0.0, "float32"))

    out = te.compute((8,), body, name="out")
    func = schedule_prim_func(te.create_prim_func([x, idx, out]), CUDA)
    source, cuda = cuda_kernels({"k": func})
    launch = source[source.index('extern "C"'):]
    assert launch.count("idx[") == 1, launch
    assert launch.count("x[") - launch.count("idx[") == 2, launch  # both inside the branch
    lib = cuda_on_host.build(source, tmp_path)
    xs = np.arange(16, dtype=np.float32)
    indices = np.array([3, -10**12, 0, 15, -1, 7, 7, 2], np.int64)
    got = np.zeros(8, np.float32)
    cuda_on_host.run(lib, cuda["k"], [xs, indices, got])
    safe = np.where(indices >= 0, indices, 0)
    np.testing.assert_array_equal(got, np.where(indices >= 0, xs[safe] * 3, 0))


def test_a_shared_buffer_is_one_array_however_many_copies_of_its_loop_allocate_it():
    # a reduction of 40 in steps of 16: unswitching copies the step loop, allocations and all
    model = _model("MatMul", {"a": [40, 40], "b": [40, 36]}, [40, 36])
    (func,) = lower(load_module(model)).prim_funcs.values()
    scheduled = schedule_prim_func(func, CUDA)
    source, _ = cuda_kernels({"k": scheduled})
    tiles = re.findall(r"__shared__ float (\w+)\[", source)
    assert sorted(tiles) == ["in0_shared", "in1_shared"]
    assert print_prim_func("k", scheduled).count('scope="shared"') > 2
