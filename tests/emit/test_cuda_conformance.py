"""NVRTC compiles, for sm_80 and sm_90, the CUDA kernels of a deterministic sample of the
ONNX backend node tests that the onnx package ships (tests/conformance/harness.py's cases):
each case imported, optimized for the CUDA target, legalized and scheduled by the GPU rules,
its distinct kernels translated and compiled in one module. `cuda_conformance_kernels(None)`
takes every case (several minutes).
"""

from __future__ import annotations

import warnings

import pytest

from tcc.emit.nvrtc import nvrtc_available

SAMPLE = 80  # cases, every k-th of the sorted list
# Known not to translate yet: none.
KNOWN: dict[str, str] = {}


def cuda_conformance_kernels(sample: int | None):
    """(distinct scheduled kernels by generated name, failures by case) of the sampled
    node tests that tcc imports and legalizes."""
    from tcc.api import lower
    from tcc.emit.cuda import cuda_kernels
    from tcc.frontend.onnx import from_onnx
    from tcc.ir.printer import print_prim_func
    from tcc.lower.passes import run_pipeline
    from tcc.lower.rules import schedule_prim_func
    from tcc.target import parse_target
    from tests.conformance.harness import collect

    target = parse_target("cuda")
    seen, funcs, failures = set(), {}, {}
    for case in collect(sample=sample):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lowered = lower(run_pipeline(from_onnx(case.model), target=target))
        except Exception:  # not imported or no loop program: the CPU harness reports it
            continue
        for func in lowered.prim_funcs.values():
            text = print_prim_func("k", func)
            if text in seen:
                continue
            seen.add(text)
            try:
                scheduled = schedule_prim_func(func, target)
                cuda_kernels({"k": scheduled})
            except Exception as e:
                failures[case.name] = f"{type(e).__name__}: {e}"
                continue
            funcs[f"k{len(funcs)}"] = scheduled
    return funcs, failures


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed (pip install 'tcc[cuda]')")
def test_the_sampled_node_tests_kernels_compile_for_sm80_and_sm90():
    from tcc.emit.cuda import cuda_kernels
    from tcc.emit.nvrtc import compile_for_archs, header_options

    funcs, failures = cuda_conformance_kernels(SAMPLE)
    assert set(failures) == set(KNOWN), failures
    assert all(KNOWN[name] in why for name, why in failures.items()), failures
    assert len(funcs) >= 30
    source, _ = cuda_kernels(funcs)
    binaries = compile_for_archs(source, "conformance.cu", (80, 90), header_options(source))
    assert {"sm_80", "sm_90"} <= set(binaries)
