"""tcc.emit.nvrtc: CUDA C -> cubin / PTX with NVRTC, which needs no GPU (only the tcc[cuda] wheel)."""

import struct

import pytest

from tcc.emit import nvrtc
from tcc.emit.nvrtc import NvrtcError, compile_cuda, compile_for_archs, supported_archs

if not nvrtc.nvrtc_available():
    pytest.skip("NVRTC is not installed (pip install 'tcc[cuda]')", allow_module_level=True)

EM_CUDA = 190

ADD = """
extern "C" __global__ void __launch_bounds__(256)
add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""

REDUCE = """
extern "C" __global__ void __launch_bounds__(256) block_sum(const float* x, float* out, int n) {
  __shared__ float partial[8];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < 8; ++w) total += partial[w];
    out[blockIdx.x] = total;
  }
}
"""

HALF = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void hadd(const __half* a, const __nv_bfloat16* b, __half* c) {
  int i = threadIdx.x;
  c[i] = __hadd(a[i], __float2half(__bfloat162float(b[i])));
}
"""


def elf_cuda_arch(cubin: bytes) -> int:
    assert cubin[:4] == b"\x7fELF" and cubin[4] == 2  # 64-bit ELF
    (machine,) = struct.unpack_from("<H", cubin, 18)
    assert machine == EM_CUDA
    (flags,) = struct.unpack_from("<I", cubin, 48)
    # CUDA ELF ABI version 7 (up to sm_90) keeps the arch in e_flags' low byte, 8 in the next.
    return flags & 0xFF if cubin[8] < 8 else (flags >> 8) & 0xFF


@pytest.fixture(scope="module")
def add_cubins():
    return {arch: compile_cuda(ADD, "add.cu", arch) for arch in (80, 90)}


def test_version_and_archs():
    major, _ = nvrtc.nvrtc_version()
    assert major >= 12
    archs = supported_archs()
    assert archs == sorted(archs) and {80, 90} <= set(archs)


def test_cubin_is_cuda_elf_for_the_arch(add_cubins):
    for arch, cubin in add_cubins.items():
        assert elf_cuda_arch(cubin) == arch
    assert b"add" in add_cubins[90]


def test_ptx_targets_the_arch_and_exports_the_kernel():
    ptx = compile_cuda(ADD, "add.cu", 90, ptx=True).decode()
    assert ".target sm_90" in ptx
    assert ".visible .entry add(" in ptx
    assert ".maxntid 256, 1, 1" in ptx  # __launch_bounds__
    assert not ptx.endswith("\0")


def test_same_source_gives_same_bytes(add_cubins):
    assert compile_cuda(ADD, "add.cu", 90) == add_cubins[90]
    # the program's name is only for messages: it does not reach the output
    assert compile_cuda(ADD, "other.cu", 90) == add_cubins[90]
    assert compile_cuda(ADD, "add.cu", 90, ptx=True) == compile_cuda(ADD, "add.cu", 90, ptx=True)


def test_compile_for_archs_keys_and_contents(add_cubins):
    out = compile_for_archs(ADD, "add.cu", [90, 80, 90])
    assert list(out) == ["sm_80", "sm_90", "compute_90.ptx"]
    assert out["sm_80"] == add_cubins[80] and out["sm_90"] == add_cubins[90]
    assert out["compute_90.ptx"] == compile_cuda(ADD, "add.cu", 90, ptx=True)
    with pytest.raises(NvrtcError, match="no architecture"):
        compile_for_archs(ADD, "add.cu", [])


def test_syntax_error_is_one_line_with_the_full_log():
    with pytest.raises(NvrtcError) as caught:
        compile_cuda('extern "C" __global__ void k(float* x) { x[0] = ; }', "broken.cu", 80)
    message = str(caught.value)
    assert "\n" not in message
    assert "'broken.cu'" in message and "sm_80" in message
    assert "broken.cu(1): error: expected an expression" in message
    assert "1 error detected in the compilation of \"broken.cu\"" in caught.value.log


def test_an_error_in_the_archs_compiled_side_by_side_keeps_its_log():
    with pytest.raises(NvrtcError) as caught:
        compile_for_archs('extern "C" __global__ void k(float* x) { x[0] = ; }', "broken.cu",
                          [80, 90])
    assert "\n" not in str(caught.value) and "'broken.cu'" in str(caught.value)
    assert "1 error detected in the compilation of \"broken.cu\"" in caught.value.log


def test_bad_option_is_reported_from_the_log():
    with pytest.raises(NvrtcError, match="'opt.cu'.*--no-such-option") as caught:
        compile_cuda(ADD, "opt.cu", 80, options=["--no-such-option"])
    assert "\n" not in str(caught.value)
    with pytest.raises(NvrtcError, match="compile_cuda's `arch`"):
        compile_cuda(ADD, "opt.cu", 80, options=["-arch=sm_90"])


def test_program_is_destroyed_also_on_error(monkeypatch):
    lib, live = nvrtc._library(), []

    class Counting:
        def __getattr__(self, name):
            fn = getattr(lib, name)
            if name == "nvrtcCreateProgram":
                return lambda prog, *rest: (live.append(prog._obj), fn(prog, *rest))[1]
            if name == "nvrtcDestroyProgram":
                return lambda prog: (live.remove(prog._obj), fn(prog))[1]
            return fn

    monkeypatch.setattr(nvrtc, "_library", Counting)
    compile_cuda(ADD, "add.cu", 80)
    with pytest.raises(NvrtcError):
        compile_cuda("not cuda", "broken.cu", 80)
    assert live == []


def test_unsupported_arch_names_the_supported_ones():
    with pytest.raises(NvrtcError, match=r"sm_11;.*sm_80, .*sm_90") as caught:
        compile_cuda(ADD, "add.cu", 11)
    assert "\n" not in str(caught.value)


def test_missing_library_gives_the_install_hint(monkeypatch, tmp_path):
    missing = tmp_path / "libnvrtc.so.12"
    monkeypatch.setenv(nvrtc.ENV, str(missing))
    nvrtc._library.cache_clear()
    try:
        assert not nvrtc.nvrtc_available()
        with pytest.raises(NvrtcError) as caught:
            nvrtc.nvrtc_version()
    finally:
        monkeypatch.undo()
        nvrtc._library.cache_clear()
    message = str(caught.value)
    assert message.startswith(nvrtc.INSTALL_HINT) and "\n" not in message
    assert str(missing) in message
    assert nvrtc.nvrtc_available()


def test_warp_shuffle_shared_memory_and_barrier_compile():
    cubin = compile_cuda(REDUCE, "block_sum.cu", 80)
    assert elf_cuda_arch(cubin) == 80
    ptx = compile_cuda(REDUCE, "block_sum.cu", 80, ptx=True).decode()
    assert "shfl.sync.down" in ptx and "bar.sync" in ptx and ".shared" in ptx


def test_fp16_headers_are_not_built_in():
    with pytest.raises(NvrtcError, match="cuda_fp16.h"):
        compile_cuda(HALF, "half.cu", 80)


def test_half_and_bfloat16_compile_with_the_cuda_runtime_headers():
    include = nvrtc.runtime_include()
    if include is None:
        pytest.skip("cuda_fp16.h comes from nvidia-cuda-runtime-cu12, which is not installed")
    cubin = compile_cuda(HALF, "half.cu", 80, options=[f"-I{include}"])
    assert elf_cuda_arch(cubin) == 80
