"""Kernels for the schedule-rule tests: one small ONNX graph per kind of stage, imported and
legalized the way `tcc compile` does, so the rules see the PrimFuncs real models give."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tcc.api import lower
from tcc.emit.llvm import compile_prim_funcs
from tcc.frontend.onnx import from_onnx
from tcc.ir import tir as T
from tcc.lower.passes import run_pipeline
from tcc.rt.kernels import load_cpu_library
from tcc.target import parse_target


def _model(node: str, inputs: dict, output: list, inits: dict | None = None, **attrs):
    """One-node ONNX model; `inputs` maps names to shapes, `inits` names to arrays."""
    rng = np.random.default_rng(0)
    inits = {k: rng.standard_normal(v).astype(np.float32) for k, v in (inits or {}).items()}
    names = list(inputs) + list(inits)
    g = helper.make_graph(
        [helper.make_node(node, names, ["y"], **attrs)],
        node.lower(),
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CONV_X = {"x": [1, 8, 15, 15]}
# name -> (model, the rule its first stage gets)
CASES = {
    "add_broadcast": (_model("Add", {"a": [3, 1, 111], "b": [1, 37, 111]}, [3, 37, 111]),
                      "elementwise"),
    "transpose": (_model("Transpose", {"x": [4, 33, 70]}, [4, 70, 33], perm=[0, 2, 1]),
                  "elementwise"),
    # the load is contiguous along the outermost axis (as NCHWc -> NCHW is along channels)
    "transpose_far": (_model("Transpose", {"x": [6, 20, 24]}, [24, 6, 20], perm=[2, 0, 1]),
                      "elementwise"),
    "matmul": (_model("MatMul", {"a": [64, 96], "b": [96, 80]}, [64, 80]), "contraction"),
    "batch_matmul": (_model("MatMul", {"a": [2, 3, 40, 24], "b": [2, 3, 24, 56]},
                            [2, 3, 40, 56]), "contraction"),
    "dense_trans_b": (_model("Gemm", {"a": [16, 72]}, [16, 40], {"w": [40, 72], "c": [40]},
                             transB=1), "contraction"),
    "gemv": (_model("Gemm", {"a": [1, 72]}, [1, 40], {"w": [40, 72], "c": [40]}, transB=1),
             "reduction"),
    "conv_pad": (_model("Conv", CONV_X, [1, 16, 15, 15], {"w": [16, 8, 3, 3]},
                        pads=[1, 1, 1, 1]), "contraction"),
    "conv_stride2": (_model("Conv", CONV_X, [1, 16, 8, 8], {"w": [16, 8, 3, 3]},
                            pads=[1, 1, 1, 1], strides=[2, 2]), "contraction"),
    "conv_depthwise": (_model("Conv", CONV_X, [1, 8, 15, 15], {"w": [8, 1, 3, 3]},
                              pads=[1, 1, 1, 1], group=8), "reduction"),  # nothing to reuse
    # the input channel is `o // 8 * 4 + rc`: reused across a row tile inside one group
    "conv_grouped": (_model("Conv", CONV_X, [1, 16, 13, 13], {"w": [16, 4, 3, 3]}, group=2),
                     "contraction"),
    # groups of 16 input and 32 output channels: blocked (NCHWc) through the pipeline
    "conv_grouped_wide": (_model("Conv", {"x": [1, 32, 14, 14]}, [1, 64, 14, 14],
                                 {"w": [64, 16, 3, 3]}, pads=[1, 1, 1, 1], group=2),
                          "contraction"),
    "softmax": (_model("Softmax", {"x": [6, 50]}, [6, 50], axis=-1), "rows"),
    "layer_norm": (_model("LayerNormalization", {"x": [5, 7, 48]}, [5, 7, 48],
                          {"g": [48], "b": [48]}, axis=-1), "rows"),
    # statistics over the channels of each pixel: a plane of them per image, not a row's
    "channel_softmax": (_model("Softmax", {"x": [3, 5, 4, 6]}, [3, 5, 4, 6], axis=1),
                        "reduction"),
    "max_pool": (_model("MaxPool", {"x": [1, 4, 17, 17]}, [1, 4, 9, 9], kernel_shape=[3, 3],
                        strides=[2, 2], pads=[1, 1, 1, 1]), "reduction"),
    "avg_pool": (_model("AveragePool", {"x": [1, 4, 12, 40]}, [1, 4, 11, 39],
                        kernel_shape=[2, 2]), "reduction"),
    "reduce_mean": (_model("ReduceMean", {"x": [6, 20, 33]}, [6, 1, 33], axes=[1]),
                    "reduction"),
    # no output axis to run as lanes: partial results in lanes instead
    "reduce_max_all": (_model("ReduceMax", {"x": [6, 20, 64]}, [], keepdims=0), "reduction"),
    "reduce_min_rows": (_model("ReduceMin", {"x": [24, 96]}, [24], axes=[1], keepdims=0),
                        "reduction"),
}
# Convolutions through the optimize pipeline for this CPU: blocked NCHWc kernels.
BLOCKED = ("conv_pad", "conv_stride2", "conv_depthwise", "conv_grouped_wide")


def kernels(name: str, blocked: bool = False) -> dict[str, T.PrimFunc]:
    """The PrimFuncs of case `name`, by kernel name prefixed with the case."""
    mod = from_onnx(CASES[name][0])
    if blocked:
        mod = run_pipeline(mod, target=parse_target("llvm"))
    return {f"{name}_{k}": f for k, f in lower(mod).prim_funcs.items()}


def conv_relu_kernels() -> dict[str, T.PrimFunc]:
    """The kernels of Conv (with bias) + Relu through the optimize pipeline: a blocked
    convolution whose epilogue (bias, ReLU) fuse-ops puts in the same kernel."""
    rng = np.random.default_rng(0)
    w, bias = rng.standard_normal((16, 8, 3, 3)), rng.standard_normal(16)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, CONV_X["x"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 15, 15])],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.astype(np.float32).ravel())
         for n, a in (("w", w), ("b", bias))],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return dict(lower(run_pipeline(from_onnx(model), target=parse_target("llvm"))).prim_funcs)


def all_kernels() -> dict[str, T.PrimFunc]:
    """The kernels of every case, and the NCHWc-layout kernels of the blocked ones."""
    funcs = {}
    for name in CASES:
        funcs.update(kernels(name))
    for name in BLOCKED:
        funcs.update({f"{k}_nchwc": f for k, f in kernels(name, blocked=True).items()})
    return funcs


def random_arguments(func: T.PrimFunc, seed: int) -> list[np.ndarray]:
    """Random arrays for every buffer of a kernel with static shapes (outputs too: a kernel
    must overwrite what is there)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(d) for d in b.shape]).astype(b.dtype) for b in func.buffers]


def run_both(plain: dict, scheduled: dict, threads: int = 2):
    """For every kernel: (its buffers after the plain kernel ran, after the scheduled one)."""
    with load_cpu_library(compile_prim_funcs(plain).shared_object) as a, \
            load_cpu_library(compile_prim_funcs(scheduled).shared_object) as b:
        b.set_num_threads(threads)
        for k, (name, func) in enumerate(sorted(plain.items())):
            want = random_arguments(func, k)
            got = [x.copy() for x in want]
            a.call(name, want)
            b.call(name, got)
            yield name, want, got
