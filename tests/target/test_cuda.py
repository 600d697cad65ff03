"""CUDA target strings: archs, limits, the canonical spelling, the host, and clear errors."""

import pytest

from tcc.target import CUDATarget, LLVMTarget, TargetError, host_target, parse_target


def test_cuda_alone_is_a100_and_h100_with_the_common_limits():
    t = parse_target("cuda")
    assert t.kind == "cuda" and t.archs == (80, 90)
    assert (t.max_threads_per_block, t.max_shared_memory_per_block, t.warp_size) == (1024, 48 * 1024, 32)
    assert t.host == host_target()  # the VM and shape arithmetic run on this machine


@pytest.mark.parametrize("text, archs", [
    ("cuda -arch=sm_90", (90,)),
    ("cuda -arch=sm_80,sm_90", (80, 90)),
    ("cuda -arch=sm_90,sm_80,sm_90", (80, 90)),  # sorted, once each
    ("cuda -arch=sm_90a", (90,)),
])
def test_archs(text, archs):
    assert parse_target(text).archs == archs


def test_canonical_string_parses_back_to_the_same_target():
    t = parse_target("cuda -arch=sm_90,sm_80 -max-threads-per-block=512")
    assert str(t) == ("cuda -arch=sm_80,sm_90 -max-threads-per-block=512 "
                      "-max-shared-memory-per-block=49152 -registers-per-block=65536")
    assert parse_target(str(t)) == t
    assert parse_target(t) is t


def test_tensor_cores_need_every_arch_to_have_them():
    assert parse_target("cuda -arch=sm_80,sm_90").tensor_cores
    assert not parse_target("cuda -arch=sm_75,sm_90").tensor_cores


def test_host_is_an_llvm_target():
    t = parse_target("cuda", host="llvm -mtriple=aarch64-linux-gnu")
    assert isinstance(t, CUDATarget) and isinstance(t.host, LLVMTarget)
    assert t.host.arch == "aarch64"
    with pytest.raises(TargetError, match="host of a CUDA target must be an llvm target"):
        parse_target("cuda", host="cuda")
    with pytest.raises(TargetError, match="an llvm target is its own host"):
        parse_target("llvm", host="llvm")


@pytest.mark.parametrize("text, message", [
    ("cuda -arch=sm_35", "bad CUDA arch 'sm_35'"),
    ("cuda -arch=90", "bad CUDA arch '90'"),
    ("cuda -arch=", "bad target option '-arch='"),
    ("cuda -mcpu=x", "bad target option '-mcpu=x'"),
    ("cuda -arch=sm_80 -arch=sm_90", "-arch is given twice"),
    ("cuda -max-threads-per-block=2048", "-max-threads-per-block must be a whole number from 1 to 1024"),
    ("cuda -max-shared-memory-per-block=lots", "must be a whole number"),
])
def test_bad_cuda_targets(text, message):
    with pytest.raises(TargetError, match=message):
        parse_target(text)
