"""The convolution tiling rule: a block of threads per tile of output channels and
positions, the input's window and the weights staged through shared memory, each thread's
outputs accumulated in registers. Checked with the GPU-semantics executor (races and
barriers included) against the reference evaluator, bit for bit: each thread sums its
outputs' products in the serial loop's order, padding included."""

import dataclasses

import pytest

from tcc.ir.gpu_eval import GpuEvalError, run_gpu_prim_func
from tcc.ir.printer import print_prim_func
from tcc.lower.rules import finish_schedule, schedule_kernel, schedule_prim_func, stage_rules
from tcc.lower.schedule.sampling import Decisions
from tcc.target import parse_target
from tests.lower.rules.cpu.rules_cases import _model
from tests.lower.rules.cuda.test_cross_thread import _without_barriers
from tests.lower.rules.cuda.test_matmul import arguments, check_bit_for_bit, kernel_of

CUDA = parse_target("cuda -arch=sm_80,sm_90")
RULE = "cuda-conv-tiling"
SIZES = {"n": 2}

CASES = {
    # padding on every side; 8 input channels in one step; two tiles of 16 columns
    "pad_3x3": _model("Conv", {"x": [1, 8, 6, 18]}, [1, 16, 6, 18], {"w": [16, 8, 3, 3]},
                      pads=[1, 1, 1, 1]),
    # a ResNet stem: stride 2, 7 x 7, 3 input channels (a ragged step), a bias epilogue
    "stem_7x7": _model("Conv", {"x": [1, 3, 13, 13]}, [1, 16, 7, 7],
                       {"w": [16, 3, 7, 7], "b": [16]}, strides=[2, 2], pads=[3, 3, 3, 3]),
    # a 1 x 1 conv keeps its unit window; columns (12) not a multiple of the threads
    "pointwise": _model("Conv", {"x": [2, 12, 10, 12]}, [2, 24, 10, 12], {"w": [24, 12, 1, 1]}),
    # a speech feature extractor's layer: a wide kernel, stride 5
    "conv1d_wide": _model("Conv", {"x": [1, 8, 90]}, [1, 16, 17], {"w": [16, 8, 10]}, strides=[5]),
    # a symbolic batch goes to the grid's z axis with the channel tiles
    "symbolic_batch": _model("Conv", {"x": ["n", 8, 9, 9]}, ["n", 12, 9, 9], {"w": [12, 8, 3, 3]},
                             pads=[1, 1, 1, 1]),
    # three window axes: the outermost joins the grid's z axis
    "conv3d": _model("Conv", {"x": [1, 4, 3, 4, 5]}, [1, 8, 3, 4, 5], {"w": [8, 4, 3, 3, 3]},
                     pads=[1, 1, 1, 1, 1, 1]),
}


def _check(func, scheduled):
    check_bit_for_bit(func, scheduled, SIZES)  # a read past the input's edge raises


@pytest.mark.parametrize("case", sorted(CASES))
def test_convolutions_are_tiled_and_compute_the_same_bit_for_bit(case):
    func = kernel_of(CASES[case])
    assert RULE in stage_rules(func, CUDA)
    _check(func, schedule_prim_func(func, CUDA))


def test_the_window_and_the_weights_are_shared_and_each_thread_accumulates_in_registers():
    func = kernel_of(CASES["pad_3x3"])
    text = print_prim_func("k", schedule_prim_func(func, CUDA))
    assert 'allocate((1, 4, 1, 1), "float32", scope="local")' in text  # 4 channels a thread
    # 8 input channels of the rows and columns under a 4 x 16 tile's 3 x 3 windows
    assert 'allocate((1, 8, 6, 18), "float32", scope="shared")' in text
    assert 'allocate((16, 8, 3, 3), "float32", scope="shared")' in text  # 16 channels' weights
    assert "threadIdx.z" in text and "blockIdx.y" in text


def test_without_the_barriers_the_executor_finds_the_race():
    func = kernel_of(CASES["pad_3x3"])
    scheduled = schedule_prim_func(func, CUDA)
    broken = dataclasses.replace(scheduled, body=_without_barriers(scheduled.body))
    assert "syncthreads" not in print_prim_func("k", broken)
    with pytest.raises(GpuEvalError, match="race"):
        run_gpu_prim_func(broken, arguments(func, SIZES))


@pytest.mark.parametrize("channels, columns, step", [(1, 1, 1), (2, 2, 4), (8, 4, 16)])
def test_the_tile_sizes_are_decisions_and_each_choice_computes_the_same(channels, columns, step):
    func = kernel_of(CASES["pad_3x3"])
    decisions = {"conv2d.conv_channels": channels, "conv2d.conv_columns": columns,
                 "conv2d.conv_step": step}
    scheduled = finish_schedule(schedule_kernel(func, CUDA, Decisions(decisions)).func)
    assert f'allocate((1, {channels}, 1, {columns}), "float32", scope="local")' in print_prim_func(
        "k", scheduled)
    _check(func, scheduled)


def test_depthwise_grouped_and_few_channel_convolutions_are_left_to_the_other_rules():
    depthwise = _model("Conv", {"x": [1, 8, 12, 12]}, [1, 8, 12, 12], {"w": [8, 1, 3, 3]},
                       pads=[1, 1, 1, 1], group=8)
    grouped = _model("Conv", {"x": [1, 8, 12, 12]}, [1, 16, 12, 12], {"w": [16, 4, 3, 3]},
                     pads=[1, 1, 1, 1], group=2)
    few = _model("Conv", {"x": [1, 8, 12, 12]}, [1, 4, 12, 12], {"w": [4, 8, 3, 3]},
                 pads=[1, 1, 1, 1])
    matmul = _model("MatMul", {"a": [40, 40], "b": [40, 36]}, [40, 36])
    for model in (depthwise, grouped, few, matmul):
        assert RULE not in stage_rules(kernel_of(model), CUDA), model.graph.node[0].op_type


def test_shared_tiles_are_sized_by_the_copy_guard_not_by_its_last_pass():
    """A copy loop fused and split by the block's 256 threads runs a guarded last pass (1152
    weights: 4.5 passes); the shared tile holds what the guard lets through, 16 x 8 x 3 x 3
    weights and 8 channels of the window, not what five whole passes would reach."""
    func = kernel_of(_model("Conv", {"x": [1, 16, 14, 14]}, [1, 32, 14, 14], {"w": [32, 16, 3, 3]},
                            pads=[1, 1, 1, 1]))
    scheduled = schedule_prim_func(func, CUDA)
    text = print_prim_func("k", scheduled)
    assert 'allocate((16, 8, 3, 3), "float32", scope="shared")' in text
    assert 'allocate((1, 8, 6, 14), "float32", scope="shared")' in text
