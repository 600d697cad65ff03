"""fuse-ops: golden before/after modules, results kept (the reference interpreter on the
input against the compiled output), and kernel counts and numerics on real models."""

import numpy as np
import pytest

import tcc.api
import tcc.rt
from tcc.frontend.onnx import from_onnx
from tcc.ir import graph as G
from tcc.ir import te
from tcc.ir.interp import run
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module, print_prim_func
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import kernel_origins, legalize
from tcc.lower.passes import run_pipeline
from tcc.lower.passes.fuse_ops import MAX_GROUP, fuse_ops
from tcc.rt.format import FuncKind, Op
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.models import builders

RTOL, ATOL = 1e-3, 1e-4


def verify(before: str, expected: str) -> None:
    mod = parse_module(before)
    text = print_module(mod)
    got = fuse_ops(mod)
    want = parse_module(expected)
    assert structural_equal(got, want), print_module(got)
    assert structural_equal(parse_module(print_module(got)), got)
    assert print_module(mod) == text  # the input module is left alone


def compiled(mod, tmp_path) -> tcc.rt.Module:
    path = tmp_path / "m.tvmpack"
    path.write_bytes(tcc.api.compile_to_bytes(mod, optimize=False))
    return tcc.rt.load(path)


def assert_kept(text: str, inputs: list, tmp_path) -> None:
    """The fused module, compiled, computes what the interpreter computes on the input."""
    mod = parse_module(text)
    for name, t in mod.const_types.items():
        mod.const_values[name] = random(*t.shape)
    want = run(mod, inputs)
    got = compiled(fuse_ops(mod), tmp_path)["main"](*inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def random(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


CONV_ADD_RELU = '''
constants = {"w": Tensor((2, 3, 1, 1), "float32"), "b": Tensor((2,), "float32")}

@function(inputs=["x", "r"], outputs=["y"])
def main(x: Tensor((n, 3, 4, 4), "float32"), r: Tensor((n, 2, 4, 4), "float32")) -> Tensor((n, 2, 4, 4), "float32"):
    c: Tensor((n, 2, 4, 4), "float32") = op.conv2d(x, const("w"), const("b"), strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1)
    a: Tensor((n, 2, 4, 4), "float32") = op.add(c, r)
    y: Tensor((n, 2, 4, 4), "float32") = op.relu(a)
    return y
'''


def test_conv_add_relu_becomes_one_kernel_with_the_sum_as_its_only_buffer():
    # The convolution keeps its reduction stage; bias, residual add and relu are one
    # elementwise stage reading it, with no buffer of their own.
    verify(
        CONV_ADD_RELU,
        '''
constants = {"w": Tensor((2, 3, 1, 1), "float32"), "b": Tensor((2,), "float32")}

@function(inputs=["x", "r"], outputs=["y"])
def main(x: Tensor((n, 3, 4, 4), "float32"), r: Tensor((n, 2, 4, 4), "float32")) -> Tensor((n, 2, 4, 4), "float32"):
    y: Tensor((n, 2, 4, 4), "float32") = call_tir("fused_conv2d_add_relu_kernel", [x, const("w"), const("b"), r], out=Tensor((n, 2, 4, 4), "float32"))
    return y

@prim_func(attrs={"origins": ("c", "a", "y")})
def fused_conv2d_add_relu_kernel(in0: Buffer((n, 3, 4, 4), "float32"), in1: Buffer((2, 3, 1, 1), "float32"), in2: Buffer((2,), "float32"), in3: Buffer((n, 2, 4, 4), "float32"), relu: Buffer((n, 2, 4, 4), "float32")):
    with block("root"):
        conv2d = alloc_buffer((n, 2, 4, 4), "float32")
        reads()
        writes()
        for i0 in serial(0, n):
            for i1 in serial(0, 2):
                for i2 in serial(0, 4):
                    for i3 in serial(0, 4):
                        for rc in serial(0, 3):
                            for ry in serial(0, 1):
                                for rx in serial(0, 1):
                                    with block("conv2d"):
                                        v_i0 = axis.spatial(n, i0)
                                        v_i1 = axis.spatial(2, i1)
                                        v_i2 = axis.spatial(4, i2)
                                        v_i3 = axis.spatial(4, i3)
                                        v_rc = axis.reduce(3, rc)
                                        v_ry = axis.reduce(1, ry)
                                        v_rx = axis.reduce(1, rx)
                                        reads(in0[v_i0, v_rc, v_i2 + v_ry, v_i3 + v_rx], in1[v_i1, v_rc, v_ry, v_rx])
                                        writes(conv2d[v_i0, v_i1, v_i2, v_i3])
                                        with init():
                                            conv2d[v_i0, v_i1, v_i2, v_i3] = 0.0
                                        conv2d[v_i0, v_i1, v_i2, v_i3] = conv2d[v_i0, v_i1, v_i2, v_i3] + in0[v_i0, v_rc, v_i2 + v_ry, v_i3 + v_rx] * in1[v_i1, v_rc, v_ry, v_rx]
        for i0_1 in serial(0, n):
            for i1_1 in serial(0, 2):
                for i2_1 in serial(0, 4):
                    for i3_1 in serial(0, 4):
                        with block("relu"):
                            v_i0_1 = axis.spatial(n, i0_1)
                            v_i1_1 = axis.spatial(2, i1_1)
                            v_i2_1 = axis.spatial(4, i2_1)
                            v_i3_1 = axis.spatial(4, i3_1)
                            reads(conv2d[v_i0_1, v_i1_1, v_i2_1, v_i3_1], in2[v_i1_1], in3[v_i0_1, v_i1_1, v_i2_1, v_i3_1])
                            writes(relu[v_i0_1, v_i1_1, v_i2_1, v_i3_1])
                            relu[v_i0_1, v_i1_1, v_i2_1, v_i3_1] = max(conv2d[v_i0_1, v_i1_1, v_i2_1, v_i3_1] + in2[v_i1_1] + in3[v_i0_1, v_i1_1, v_i2_1, v_i3_1], 0.0)
''',
    )


INJECTIVE_CHAIN = '''
constants = {"s": Tensor((3,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((3, n), "float32")) -> Tensor((n, 3), "float32"):
    t: Tensor((n, 3), "float32") = op.transpose(x, axes=[1, 0])
    e: Tensor((n, 3), "float32") = op.exp(t)
    y: Tensor((n, 3), "float32") = op.mul(e, const("s"))
    return y
'''


def test_injective_chain_is_one_stage_reading_through_the_transpose():
    verify(
        INJECTIVE_CHAIN,
        '''
constants = {"s": Tensor((3,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((3, n), "float32")) -> Tensor((n, 3), "float32"):
    y: Tensor((n, 3), "float32") = call_tir("fused_transpose_exp_mul_kernel", [x, const("s")], out=Tensor((n, 3), "float32"))
    return y

@prim_func(attrs={"origins": ("t", "e", "y")})
def fused_transpose_exp_mul_kernel(in0: Buffer((3, n), "float32"), in1: Buffer((3,), "float32"), mul: Buffer((n, 3), "float32")):
    with block("root"):
        reads()
        writes()
        for i0 in serial(0, n):
            for i1 in serial(0, 3):
                with block("mul"):
                    v_i0 = axis.spatial(n, i0)
                    v_i1 = axis.spatial(3, i1)
                    reads(in0[v_i1, v_i0], in1[v_i1])
                    writes(mul[v_i0, v_i1])
                    mul[v_i0, v_i1] = exp(in0[v_i1, v_i0]) * in1[v_i1]
''',
    )


SHARED_AND_RETURNED = '''
@function(inputs=["x"], outputs=["y", "e"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    a: Tensor((4,), "float32") = op.exp(x)
    b: Tensor((4,), "float32") = op.relu(a)
    c: Tensor((4,), "float32") = op.neg(a)
    d: Tensor((4,), "float32") = op.add(b, c)
    e: Tensor((4,), "float32") = op.sqrt(x)
    f: Tensor((4,), "float32") = op.abs(e)
    y: Tensor((4,), "float32") = op.mul(d, f)
    return y, e
'''


def test_a_result_with_two_users_or_returned_stays_a_kernel_output():
    # a feeds b and c, e is returned: both stay; the two branches b, c meet in d and join
    # the final mul with f (the name spells out MAX_NAME_OPS of the five ops).
    verify(
        SHARED_AND_RETURNED,
        '''
@function(inputs=["x"], outputs=["y", "e"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    a: Tensor((4,), "float32") = op.exp(x)
    e: Tensor((4,), "float32") = op.sqrt(x)
    y: Tensor((4,), "float32") = call_tir("fused_relu_neg_add_abs_1_more_kernel", [a, e], out=Tensor((4,), "float32"))
    return y, e

@prim_func(attrs={"origins": ("b", "c", "d", "f", "y")})
def fused_relu_neg_add_abs_1_more_kernel(in0: Buffer((4,), "float32"), in1: Buffer((4,), "float32"), mul: Buffer((4,), "float32")):
    with block("root"):
        reads()
        writes()
        for i0 in serial(0, 4):
            with block("mul"):
                v_i0 = axis.spatial(4, i0)
                reads(in0[v_i0], in1[v_i0])
                writes(mul[v_i0])
                mul[v_i0] = (max(in0[v_i0], 0.0) + in0[v_i0] * -1.0) * abs(in1[v_i0])
''',
    )


REDUCTION = '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4), "float32")) -> Tensor((n, 1), "float32"):
    e: Tensor((n, 4), "float32") = op.exp(x)
    s: Tensor((n, 1), "float32") = op.reduce_sum(e, axes=[1], keepdims=1)
    y: Tensor((n, 1), "float32") = op.log(s)
    return y
'''


def test_reduction_reads_its_prologue_in_place_and_keeps_a_stage_for_its_epilogue():
    verify(
        REDUCTION,
        '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4), "float32")) -> Tensor((n, 1), "float32"):
    y: Tensor((n, 1), "float32") = call_tir("fused_exp_reduce_sum_log_kernel", [x], out=Tensor((n, 1), "float32"))
    return y

@prim_func(attrs={"origins": ("e", "s", "y")})
def fused_exp_reduce_sum_log_kernel(in0: Buffer((n, 4), "float32"), log_: Buffer((n, 1), "float32")):
    with block("root"):
        reduce_sum = alloc_buffer((n, 1), "float32")
        reads()
        writes()
        for i0 in serial(0, n):
            for i1 in serial(0, 1):
                for r1 in serial(0, 4):
                    with block("reduce_sum"):
                        v_i0 = axis.spatial(n, i0)
                        v_i1 = axis.spatial(1, i1)
                        v_r1 = axis.reduce(4, r1)
                        reads(in0[v_i0, v_r1])
                        writes(reduce_sum[v_i0, v_i1])
                        with init():
                            reduce_sum[v_i0, v_i1] = 0.0
                        reduce_sum[v_i0, v_i1] = reduce_sum[v_i0, v_i1] + exp(in0[v_i0, v_r1])
        for i0_1 in serial(0, n):
            for i1_1 in serial(0, 1):
                with block("log"):
                    v_i0_1 = axis.spatial(n, i0_1)
                    v_i1_1 = axis.spatial(1, i1_1)
                    reads(reduce_sum[v_i0_1, 0])
                    writes(log_[v_i0_1, v_i1_1])
                    log_[v_i0_1, v_i1_1] = log(reduce_sum[v_i0_1, 0])
''',
    )


def test_views_opaque_ops_and_injective_epilogues_stay_apart():
    # relu -> reshape (a view) -> exp -> softmax (opaque: no prologue joins it) -> log (an
    # opaque op); matmul -> transpose (an injective op is no epilogue: the schedule could
    # not compute it in place).
    same = '''
@function(inputs=["x", "w"], outputs=["y", "z"])
def main(x: Tensor((2, 6), "float32"), w: Tensor((6, 3), "float32")) -> Tuple(Tensor((3, 4), "float32"), Tensor((3, 2), "float32")):
    a: Tensor((2, 6), "float32") = op.relu(x)
    b: Tensor((3, 4), "float32") = op.reshape(a, shape=[3, 4])
    c: Tensor((3, 4), "float32") = op.exp(b)
    d: Tensor((3, 4), "float32") = op.softmax(c, axes=[1])
    y: Tensor((3, 4), "float32") = op.hardmax(d, axes=[1])
    m: Tensor((2, 3), "float32") = op.matmul(x, w)
    z: Tensor((3, 2), "float32") = op.transpose(m, axes=[1, 0])
    return y, z
'''
    verify(same, same)


SOFTMAX_NAN_TO_ZERO = '''
constants = {"zero": Tensor((1,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 40), "float32")) -> Tensor((n, 40), "float32"):
    s: Tensor((n, 40), "float32") = op.softmax(x, axes=[1])
    nan: Tensor((n, 40), "bool") = op.is_nan(s)
    y: Tensor((n, 40), "float32") = op.where(nan, const("zero"), s)
    return y
'''


def test_a_softmax_anchors_its_epilogue_and_keeps_its_own_stages():
    # The exporters' where(isnan(p), 0, p) reads the softmax twice and joins it as the last
    # stage; the exps keep their stage (inlined, each would be computed twice).
    verify(
        SOFTMAX_NAN_TO_ZERO,
        '''
constants = {"zero": Tensor((1,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 40), "float32")) -> Tensor((n, 40), "float32"):
    y: Tensor((n, 40), "float32") = call_tir("fused_softmax_is_nan_where_kernel", [x, const("zero")], out=Tensor((n, 40), "float32"))
    return y

@prim_func(attrs={"origins": ("s", "nan", "y")})
def fused_softmax_is_nan_where_kernel(in0: Buffer((n, 40), "float32"), in1: Buffer((1,), "float32"), where: Buffer((n, 40), "float32")):
    with block("root"):
        softmax_max = alloc_buffer((n,), "float32")
        softmax_exp = alloc_buffer((n, 40), "float32")
        softmax_sum = alloc_buffer((n,), "float32")
        reads()
        writes()
        for i0 in serial(0, n):
            for r1 in serial(0, 40):
                with block("softmax_max"):
                    v_i0 = axis.spatial(n, i0)
                    v_r1 = axis.reduce(40, r1)
                    reads(in0[v_i0, v_r1])
                    writes(softmax_max[v_i0])
                    with init():
                        softmax_max[v_i0] = float32("-inf")
                    softmax_max[v_i0] = max(softmax_max[v_i0], in0[v_i0, v_r1])
        for i0_1 in serial(0, n):
            for i1 in serial(0, 40):
                with block("softmax_exp"):
                    v_i0_1 = axis.spatial(n, i0_1)
                    v_i1 = axis.spatial(40, i1)
                    reads(in0[v_i0_1, v_i1], softmax_max[v_i0_1])
                    writes(softmax_exp[v_i0_1, v_i1])
                    softmax_exp[v_i0_1, v_i1] = exp(in0[v_i0_1, v_i1] - softmax_max[v_i0_1])
        for i0_2 in serial(0, n):
            for r1_1 in serial(0, 40):
                with block("softmax_sum"):
                    v_i0_2 = axis.spatial(n, i0_2)
                    v_r1_1 = axis.reduce(40, r1_1)
                    reads(softmax_exp[v_i0_2, v_r1_1])
                    writes(softmax_sum[v_i0_2])
                    with init():
                        softmax_sum[v_i0_2] = 0.0
                    softmax_sum[v_i0_2] = softmax_sum[v_i0_2] + softmax_exp[v_i0_2, v_r1_1]
        for i0_3 in serial(0, n):
            for i1_1 in serial(0, 40):
                with block("where"):
                    v_i0_3 = axis.spatial(n, i0_3)
                    v_i1_1 = axis.spatial(40, i1_1)
                    reads(softmax_exp[v_i0_3, v_i1_1], softmax_sum[v_i0_3], in1[0])
                    writes(where[v_i0_3, v_i1_1])
                    where[v_i0_3, v_i1_1] = select(isnan(softmax_exp[v_i0_3, v_i1_1] / softmax_sum[v_i0_3]), in1[0], softmax_exp[v_i0_3, v_i1_1] / softmax_sum[v_i0_3])
''',
    )


@pytest.mark.parametrize("rows", [1, 19])
def test_a_softmax_with_its_epilogue_computes_the_bits_of_the_two_kernels(rows, tmp_path):
    # Scheduled and compiled, the fused kernel gives exactly what the softmax kernel and the
    # where kernel give, rows of -inf (a NaN softmax, zeroed) and NaN included.
    mod = parse_module(SOFTMAX_NAN_TO_ZERO)
    mod.const_values["zero"] = np.zeros(1, np.float32)
    x = random(rows, 40) * 30
    x[0, :] = -np.inf
    x[-1, 7] = np.nan
    assert "fused_softmax_is_nan_where_kernel" in fuse_ops(mod).functions
    (tmp_path / "fused").mkdir()
    (tmp_path / "apart").mkdir()
    fused = compiled(fuse_ops(mod), tmp_path / "fused")["main"](x)[0]
    apart = compiled(mod, tmp_path / "apart")["main"](x)[0]
    assert fused.tobytes() == apart.tobytes()
    assert not np.isnan(fused).any() and (fused[0] == 0).all()


def test_a_softmax_stays_apart_from_a_broadcasting_epilogue_and_when_returned():
    # softmax -> add broadcast to a larger shape: each softmax element would be computed
    # once per batch; a softmax also returned is a kernel output.
    same = '''
@function(inputs=["x", "b"], outputs=["y", "s2", "r"])
def main(x: Tensor((3, 4), "float32"), b: Tensor((2, 3, 4), "float32")) -> Tuple(Tensor((2, 3, 4), "float32"), Tensor((3, 4), "float32"), Tensor((3, 4), "float32")):
    s: Tensor((3, 4), "float32") = op.softmax(x, axes=[1])
    y: Tensor((2, 3, 4), "float32") = op.add(s, b)
    s2: Tensor((3, 4), "float32") = op.softmax(x, axes=[0])
    r: Tensor((3, 4), "float32") = op.relu(s2)
    return y, s2, r
'''
    verify(same, same)


def test_inlining_substitutes_at_each_load_and_leaves_the_given_program_alone():
    x = te.placeholder((4,), "float32", "x")
    e = te.compute((4,), lambda i: te.exp(x[i]), "e")
    y = te.compute((4,), lambda i: e[i] + e[3 - i], "y")
    (inlined,) = te.inline_injective([y])
    fused, plain = te.create_prim_func([x, inlined]), te.create_prim_func([x, y])
    assert [b.name for b in fused.body.alloc_buffers] == []
    assert [b.name for b in plain.body.alloc_buffers] == ["e"]
    a = random(4)
    out = np.zeros(4, np.float32)
    run_prim_func(fused, [a, out])
    np.testing.assert_allclose(out, np.exp(a) + np.exp(a[::-1]), rtol=1e-6)


def test_a_group_has_one_anchor():
    # relu may follow the matmul or precede the reduction, not both.
    mod = fuse_ops(parse_module('''
@function(inputs=["x", "w"], outputs=["y"])
def main(x: Tensor((2, 6), "float32"), w: Tensor((6, 3), "float32")) -> Tensor((2,), "float32"):
    m: Tensor((2, 3), "float32") = op.matmul(x, w)
    r: Tensor((2, 3), "float32") = op.relu(m)
    y: Tensor((2,), "float32") = op.reduce_sum(r, axes=[1], keepdims=0)
    return y
'''))
    (kernel, rest) = mod["main"].bindings
    assert isinstance(kernel.value, G.CallTIR) and kernel.var.name == "r"
    assert dict(mod[kernel.value.func].attrs)["origins"] == ("m", "r")
    assert isinstance(rest.value, G.Call) and rest.value.op == "reduce_sum"


def test_size_variable_only_an_intermediate_knows_is_a_kernel_argument(tmp_path):
    # n is the broadcast's row count, which neither x nor the (4,) result shows the kernel:
    # the group still fuses, and the kernel takes n as a scalar argument (shape_args).
    before = '''
@function(inputs=["x", "m"], outputs=["y"])
def main(x: Tensor((1, 4), "float32"), m: Tensor((n,), "float32")) -> Tensor((4,), "float32"):
    b: Tensor((n, 4), "float32") = op.broadcast_to(x, shape=[n, 4])
    e: Tensor((n, 4), "float32") = op.exp(b)
    y: Tensor((4,), "float32") = op.reduce_sum(e, axes=[0], keepdims=0)
    return y
'''
    after = '''
@function(inputs=["x", "m"], outputs=["y"])
def main(x: Tensor((1, 4), "float32"), m: Tensor((n,), "float32")) -> Tensor((4,), "float32"):
    y: Tensor((4,), "float32") = call_tir("fused_broadcast_to_exp_reduce_sum_kernel", [x], out=Tensor((4,), "float32"), shape_args=[n])
    return y


@prim_func(attrs={"origins": ("b", "e", "y")})
def fused_broadcast_to_exp_reduce_sum_kernel(in0: Buffer((1, 4), "float32"), reduce_sum: Buffer((4,), "float32"), n: int64):
    with block("root"):
        reads()
        writes()
        for i0 in serial(0, 4):
            for r0 in serial(0, n):
                with block("reduce_sum"):
                    v_i0 = axis.spatial(4, i0)
                    v_r0 = axis.reduce(n, r0)
                    reads(in0[0, v_i0])
                    writes(reduce_sum[v_i0])
                    with init():
                        reduce_sum[v_i0] = 0.0
                    reduce_sum[v_i0] = reduce_sum[v_i0] + exp(in0[0, v_i0])
'''
    verify(before, after)
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    with compiled(parse_module(before), tmp_path) as m:
        for n in (1, 5):
            want = run(parse_module(before), [x, np.zeros(n, np.float32)])[0]
            (got,) = m["main"](x, np.zeros(n, np.float32))
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_control_flow_bodies_are_fused_and_equal_groups_share_one_kernel():
    body = '''
@function(inputs=["x"], outputs=["y"])
def main_if0_{0}(x: Tensor((n, 3), "float32")) -> Tensor((n, 3), "float32"):
    {1}
    return y
'''
    head = '''
@function(inputs=["c", "x"], outputs=["r"])
def main(c: Tensor((1,), "bool"), x: Tensor((n, 3), "float32")) -> Tensor((n, 3), "float32"):
    r: Tensor((n, 3), "float32") = if_(c, then_branch="main_if0_then", else_branch="main_if0_else", args=[x])
    return r
'''
    ops = '''a: Tensor((n, 3), "float32") = op.exp(x)
    y: Tensor((n, 3), "float32") = op.neg(a)'''
    call = 'y: Tensor((n, 3), "float32") = call_tir("fused_exp_neg_kernel", [x], out=Tensor((n, 3), "float32"))'
    verify(
        body.format("then", ops) + body.format("else", ops) + head,
        body.format("then", call) + body.format("else", call) + head + '''
@prim_func(attrs={"origins": ("a", "y")})
def fused_exp_neg_kernel(in0: Buffer((n, 3), "float32"), neg: Buffer((n, 3), "float32")):
    with block("root"):
        reads()
        writes()
        for i0 in serial(0, n):
            for i1 in serial(0, 3):
                with block("neg"):
                    v_i0 = axis.spatial(n, i0)
                    v_i1 = axis.spatial(3, i1)
                    reads(in0[v_i0, v_i1])
                    writes(neg[v_i0, v_i1])
                    neg[v_i0, v_i1] = exp(in0[v_i0, v_i1]) * -1.0
''',
    )


SYMBOLIC = '''
@function(inputs=["x", "u"], outputs=["y", "z"])
def main(x: Tensor((b, s, 8), "float32"), u: Tensor((m, 8), "float32")) -> Tuple(Tensor((b * s, 8), "float32"), Tensor((m, 8), "float32")):
    f: Tensor((b * s, 8), "float32") = op.reshape(x, shape=[b * s, 8])
    e: Tensor((b * s, 8), "float32") = op.exp(f)
    y: Tensor((b * s, 8), "float32") = op.neg(e)
    g: Tensor((m, 8), "float32") = op.exp(u)
    z: Tensor((m, 8), "float32") = op.neg(g)
    return y, z
'''


def test_symbolic_batch_compound_dimensions_share_the_kernel_of_a_plain_one():
    mod = fuse_ops(parse_module(SYMBOLIC))
    calls = [b.value for b in mod["main"].bindings if isinstance(b.value, G.CallTIR)]
    assert [c.func for c in calls] == ["fused_exp_neg_kernel"] * 2
    assert [G.type_of(a).shape for c in calls for a in c.args] == [
        G.type_of(mod["main"].bindings[0].var).shape, mod["main"].params[1].type.shape]
    assert dict(mod["fused_exp_neg_kernel"].attrs)["origins"] == ("e", "y", "g", "z")


def test_groups_stop_at_max_group_ops():
    n = MAX_GROUP + 8
    lines = [f'    a{i + 1}: Tensor((4,), "float32") = op.relu(a{i})' for i in range(n)]
    text = f'''
@function(inputs=["a0"], outputs=["y"])
def main(a0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
{chr(10).join(lines)}
    return a{n}
'''
    mod = fuse_ops(parse_module(text))
    sizes = [len(dict(mod[b.value.func].attrs)["origins"]) for b in mod["main"].bindings]
    assert sizes == [MAX_GROUP, n - MAX_GROUP]


def test_kernel_origins_name_every_fused_binding():
    lowered = legalize(fuse_ops(parse_module(SHARED_AND_RETURNED)))
    assert kernel_origins(lowered) == {
        "exp_kernel": ["a"],
        "sqrt_kernel": ["e"],
        "fused_relu_neg_add_abs_1_more_kernel": ["b", "c", "d", "f", "y"],
    }


CONV_SWISH = '''
constants = {"w": Tensor((2, 3, 1, 1), "float32"), "b": Tensor((2,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 3, 4, 4), "float32")) -> Tensor((n, 2, 4, 4), "float32"):
    c: Tensor((n, 2, 4, 4), "float32") = op.conv2d(x, const("w"), const("b"), strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1)
    s: Tensor((n, 2, 4, 4), "float32") = op.sigmoid(c)
    y: Tensor((n, 2, 4, 4), "float32") = op.mul(c, s)
    return y
'''


def _calls(mod) -> list[str]:
    return [b.value.func for b in mod.functions["main"].bindings if isinstance(b.value, G.CallTIR)]


def test_an_epilogue_reading_the_anchor_twice_joins_it():
    """swish (c * sigmoid(c)) reads the conv's result twice, both reads in the epilogue: the
    conv, the sigmoid and the mul are one kernel, and its schedule writes the result once."""
    fused = fuse_ops(parse_module(CONV_SWISH))
    assert _calls(fused) == ["fused_conv2d_sigmoid_mul_kernel"]
    assert [b.var.name for b in fused.functions["main"].bindings] == ["y"]
    from tcc.lower.rules import schedule_prim_func
    from tcc.target import parse_target

    scheduled = schedule_prim_func(fused.functions["fused_conv2d_sigmoid_mul_kernel"],
                                   parse_target("llvm"))
    text = print_prim_func("k", scheduled)
    assert "alloc_buffer" not in text  # no conv result kept in memory for a second pass
    assert text.count("parallel(") == 1


CONV_SWISH_RETURNED = '''
constants = {"w": Tensor((2, 3, 1, 1), "float32"), "b": Tensor((2,), "float32")}

@function(inputs=["x"], outputs=["y", "c"])
def main(x: Tensor((n, 3, 4, 4), "float32")) -> Tuple(Tensor((n, 2, 4, 4), "float32"), Tensor((n, 2, 4, 4), "float32")):
    c: Tensor((n, 2, 4, 4), "float32") = op.conv2d(x, const("w"), const("b"), strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1)
    s: Tensor((n, 2, 4, 4), "float32") = op.sigmoid(c)
    y: Tensor((n, 2, 4, 4), "float32") = op.mul(c, s)
    return y, c
'''


def test_an_anchor_result_read_outside_the_epilogue_stays_a_kernel_output():
    fused = fuse_ops(parse_module(CONV_SWISH_RETURNED))
    assert _calls(fused) == ["fused_sigmoid_mul_kernel"]
    assert [b.var.name for b in fused.functions["main"].bindings] == ["c", "y"]


@pytest.mark.parametrize(
    "text, inputs",
    [
        (CONV_ADD_RELU, [random(2, 3, 4, 4), random(2, 2, 4, 4)]),
        (INJECTIVE_CHAIN, [random(3, 5)]),
        (SHARED_AND_RETURNED, [np.abs(random(4))]),
        (REDUCTION, [random(3, 4)]),
        (SYMBOLIC, [random(2, 3, 8), random(5, 8)]),
        (CONV_SWISH, [random(2, 3, 4, 4)]),
    ],
    ids=["conv-add-relu", "injective", "shared", "reduction", "symbolic", "conv-swish"],
)
def test_fused_module_computes_what_the_interpreter_does(text, inputs, tmp_path):
    assert_kept(text, inputs, tmp_path)


# ---------------------------------------------------------------------------------------------
# models


def optimized(model):
    """The model after every pass before fusion."""
    return run_pipeline(from_onnx(model), disable=["fuse-ops"])


def kernel_calls(module: tcc.rt.Module) -> int:
    exe = module.executable
    (main,) = [f for f in exe.functions if f.name == "main"]
    return sum(1 for i in main.code if i.op == Op.CALL and exe.table[i.a][0] == FuncKind.KERNEL)


def image_feeds(model) -> dict:
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    return {image.name: np.random.default_rng(0).standard_normal(shape, dtype=np.float32)}


def assert_matches_onnxruntime(module: tcc.rt.Module, model, feeds: dict) -> None:
    got = module["main"](**feeds)
    want = onnxruntime_outputs(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL * max(1.0, np.abs(w).max()))


@pytest.fixture(scope="module")
def resnet50(tmp_path_factory):
    model = builders.light_model("resnet50")
    before = optimized(model)
    return model, before, compiled(fuse_ops(before), tmp_path_factory.mktemp("resnet50"))


def test_resnet50_runs_at_most_75_kernels_with_every_relu_and_add_in_a_conv_kernel(resnet50):
    _, before, module = resnet50
    assert kernel_calls(module) <= 75
    op_of = {b.var.name: b.value.op for b in before["main"].bindings if isinstance(b.value, G.Call)}
    kernel_ops = {k: {op_of[n] for n in names} for k, names in module.kernel_origins.items()}
    kernel_of = {n: k for k, names in module.kernel_origins.items() for n in names}
    epilogues = [n for n, op in op_of.items() if op in ("relu", "add")]
    assert len(epilogues) == 65
    for name in epilogues:
        assert "conv2d" in kernel_ops[kernel_of[name]], name


def test_resnet50_matches_onnxruntime(resnet50):
    model, _, module = resnet50
    assert_matches_onnxruntime(module, model, image_feeds(model))


def test_squeezenet_matches_onnxruntime(tmp_path):
    model = builders.light_model("squeezenet")
    assert_matches_onnxruntime(compiled(fuse_ops(optimized(model)), tmp_path), model,
                               image_feeds(model))


def test_bert_matches_onnxruntime(tmp_path):
    model = builders.bert_encoder(max_positions=32)
    module = compiled(fuse_ops(optimized(model)), tmp_path)
    names = {vi.name for vi in model.graph.input}
    feeds = token_inputs(np.random.default_rng(0), 2, 16, vocab=100)
    assert_matches_onnxruntime(module, model, {k: v for k, v in feeds.items() if k in names})


RECOMPUTED = '''
@function(inputs=["x", "w"], outputs=["y", "z"])
def main(x: Tensor((n, 8, 1), "float32"), w: Tensor((n, 8, 3), "float32")) -> Tuple(Tensor((n, 8, 3), "float32"), Tensor((n, 8, 3), "float32")):
    a: Tensor((n, 8, 1), "float32") = op.abs(x)
    b: Tensor((n, 8, 1), "float32") = op.log(a)
    c: Tensor((n, 8, 1), "float32") = op.exp(b)
    d: Tensor((n, 8, 1), "float32") = op.sqrt(c)
    e: Tensor((n, 8, 1), "float32") = op.tanh(d)
    y: Tensor((n, 8, 3), "float32") = op.add(e, w)
    s: Tensor((n, 8, 1), "float32") = op.abs(x)
    t: Tensor((n, 8, 1), "float32") = op.exp(s)
    z: Tensor((n, 8, 3), "float32") = op.add(t, w)
    return y, z
'''


def test_a_long_chain_is_stored_once_rather_than_recomputed_per_broadcast_element(tmp_path):
    """Five ops feeding a consumer with three times their elements are a kernel of their
    own; two ops are recomputed in the consumer, as before."""
    mod = fuse_ops(parse_module(RECOMPUTED))
    kernels = [dict(mod[b.value.func].attrs)["origins"] for b in mod["main"].bindings
               if isinstance(b.value, G.CallTIR)]
    assert ("a", "b", "c", "d", "e") in kernels
    assert ("s", "t", "z") in kernels
    assert not any("y" in k and "e" in k for k in kernels)
    assert_kept(RECOMPUTED, [random(5, 8, 1), random(5, 8, 3)], tmp_path)


SHUFFLE = '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor(({n}, 2, 3, 3, 4), "float32")) -> Tensor(({n}, 2, 3, 3, 4), "float32"):
    a: Tensor(({n}, 8, 3, 3), "float32") = op.layout_transform(x, src="NCHW4c", dst="NCHW")
    b: Tensor(({n}, 2, 4, 3, 3), "float32") = op.reshape(a, shape=[{n}, 2, 4, 3, 3])
    c: Tensor(({n}, 4, 2, 3, 3), "float32") = op.transpose(b, axes=[0, 2, 1, 3, 4])
    d: Tensor(({n}, 8, 3, 3), "float32") = op.reshape(c, shape=[{n}, 8, 3, 3])
    y: Tensor(({n}, 2, 3, 3, 4), "float32") = op.layout_transform(d, src="NCHW", dst="NCHW4c")
    return y
'''


def test_a_channel_shuffle_between_layout_transforms_is_one_kernel(tmp_path):
    """Views of static shapes join the data movement around them: one pass over memory."""
    text = SHUFFLE.format(n=1)
    (binding,) = fuse_ops(parse_module(text))["main"].bindings
    assert isinstance(binding.value, G.CallTIR) and binding.var.name == "y"
    assert_kept(text, [random(1, 2, 3, 3, 4)], tmp_path)


def test_views_of_symbolic_shapes_stay_views():
    """Over a symbolic batch a fused view's indices would take real divisions."""
    mod = fuse_ops(parse_module(SHUFFLE.format(n="n")))
    ops = [b.value.op for b in mod["main"].bindings if isinstance(b.value, G.Call)]
    assert ops.count("reshape") == 2


@pytest.mark.parametrize("body, ops", [
    # a transform into a view, the view read by elementwise code
    ('''a: Tensor((1, 8, 3, 3), "float32") = op.layout_transform(x, src="NCHW4c", dst="NCHW")
    b: Tensor((1, 2, 4, 9), "float32") = op.reshape(a, shape=[1, 2, 4, 9])
    y: Tensor((1, 2, 4, 9), "float32") = op.exp(b)''', ["layout_transform", "reshape", "exp"]),
    # a channel shuffle alone
    ('''a: Tensor((1, 2, 3, 12), "float32") = op.reshape(x, shape=[1, 2, 3, 12])
    b: Tensor((1, 3, 2, 12), "float32") = op.transpose(a, axes=[0, 2, 1, 3])
    y: Tensor((1, 2, 4, 9), "float32") = op.reshape(b, shape=[1, 2, 4, 9])''',
     ["reshape", "transpose", "reshape"]),
])
def test_views_beside_one_data_movement_stay_views(body, ops, tmp_path):
    """Views around a single op that moves data: one pass over memory either way, so the
    views stay views and the op's kernel keeps its simple indices (ShuffleNet's NCHW16c ->
    NCHW feeding a matmul through a reshape ran 0.12 ms fused, 0.02 ms apart, 2 threads of
    an Intel Xeon)."""
    text = f'''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 2, 3, 3, 4), "float32")) -> Tensor((1, 2, 4, 9), "float32"):
    {body}
    return y
'''
    mod = fuse_ops(parse_module(text))
    assert [b.value.op for b in mod["main"].bindings] == ops
    assert_kept(text, [random(1, 2, 3, 3, 4)], tmp_path)
