"""tcc vs onnxruntime on the test model set: latency (median and spread), ratio, compile time.

    .venv/bin/python benchmarks/models.py [--runs 20] [--rounds 5] [--threads 2]
                                          [--models resnet50,bert] [--optimize-off] [--corpus]
                                          [--seq 128]

Both run in this process, on the same seeded inputs and thread count; tcc's C runtime and
onnxruntime alternate in rounds (`--rounds`), so that a shared machine's drift reaches
both, and each batch of runs starts after a pause (`SETTLE_S`), so that neither runs while
the other's threads still spin (onnxruntime's do for a while after each run). tcc's pack runs in both of its runtimes: the Python loader (tcc.rt) and the C
runtime (libtccrt.so, built with make into a temporary folder and called through ctypes,
as tests/runtime_c does); the ratio is the C runtime's, the deployment runtime (the Python
loader's is in its own column; it adds the interpreter's per-instruction cost). A model tcc cannot
compile yet is listed with the reason. The first outputs are compared (rtol 1e-3,
atol 1e-4, or one quantization step for an output a DequantizeLinear writes) so a fast
wrong answer never counts. Each row also gives the kernel calls of one
inference (counted by the VM's profiler). `--optimize-off` adds the same model compiled
without the graph passes (`tcc compile --no-optimize`): its latency and kernel calls.
`--corpus` adds the real exports of `make corpus` (tools/export_corpus.py; those found in
$TCC_CORPUS_DIR or ~/.cache/tcc/corpus) at batch 1, sequence 128 (`--seq`), 16000 audio
frames.
Each row names the model's slowest kernel and its share of a run (the Python runtime's
profiler), and the last line gives the geomean of the tcc/ort ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.models import builders  # noqa: E402

LIGHT = ["squeezenet", "resnet50", "shufflenet", "inception_v1", "inception_v2", "densenet121",
         "bvlc_alexnet", "zfnet512", "vgg19"]


CORPUS_SIZES = {"batch": 1, "seq": 128, "frames": 16000}


def models(corpus: bool = False):
    """(name, model, feeds) for each model; feeds(model, rng) gives its inputs."""
    text = dict(layers=4, hidden=256, heads=4, max_positions=128)
    tokens = lambda model, rng: feeds_for(model, {"batch": 1, "seq": 128}, rng)  # noqa: E731
    yield "bert", builders.bert_encoder(ffn=1024, **text), tokens
    yield "gpt2", builders.gpt2_decoder(**text), tokens
    for name in LIGHT:
        yield name, builders.light_model(name), lambda model, rng: feeds_for(model, {}, rng)
    if corpus:
        yield from corpus_models()


def corpus_models():
    import json

    import onnx

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from export_corpus import MODELS, QUANTIZED, default_dir, example_inputs

    for name in [*MODELS, *QUANTIZED]:
        path = default_dir() / f"{name}.onnx"
        if path.exists():
            spec = json.loads(path.with_suffix(".json").read_text())["inputs"]
            yield name, onnx.load(str(path)), (
                lambda model, rng, spec=spec: example_inputs(spec, CORPUS_SIZES, seed=0))


def feeds_for(model, dims: dict, rng) -> dict:
    from onnx import helper

    feeds = {}
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1) for d in tt.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in vi.name:
            feeds[vi.name] = np.ones(shape, dtype)
        else:
            feeds[vi.name] = rng.integers(0, 100, shape).astype(dtype)
    return feeds


# onnxruntime's intra-op threads keep spinning for a while after a run (its default,
# session.intra_op.allow_spinning), on the cores that whatever runs next needs: timed right
# after onnxruntime, tcc's C runtime ran the BERT builder in 9.9 ms (median; 5.0-7.4 ms with
# onnxruntime's spinning off), 5.6 ms after this pause (2 threads, AMD EPYC). Each timed
# batch starts after it, so every contender runs on quiet cores, and onnxruntime keeps the
# spinning that gives it its best latency.
SETTLE_S = 0.25


def settle() -> None:
    time.sleep(SETTLE_S)


def timed(fn, runs: int) -> list[float]:
    """`runs` wall times in ms of `fn()`, after a pause (`SETTLE_S`) and one warm-up run."""
    settle()
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def alternating(first, second, runs: int, rounds: int) -> tuple[list[float], list[float]]:
    """`runs` timings of each of two contenders, taken in `rounds` alternating rounds, so
    that the drift of a shared machine reaches both alike."""
    a: list[float] = []
    b: list[float] = []
    per = max(1, -(-runs // max(1, rounds)))
    while len(a) < runs:
        a += timed(first, min(per, runs - len(a)))
        b += timed(second, min(per, runs - len(b)))
    return a, b


def c_runtime():
    """The C runtime's library, built once into a temporary folder (None when that fails)."""
    import subprocess
    import tempfile

    from tests.runtime_c.capi import CRuntime, build_runtime

    build = Path(tempfile.gettempdir()) / f"tcc-bench-runtime-{os.getuid()}"
    try:
        build_runtime(build)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"(no C runtime: {e})")
        return None
    return CRuntime(build / "libtccrt.so")


def c_module(rt, model, threads: int):
    """`model` compiled to a pack file and loaded by the C runtime, with its input order."""
    import tempfile

    import tcc

    with tempfile.TemporaryDirectory() as d:
        pack = Path(d) / "model.tvmpack"
        tcc.compile(model, output=pack)
        module = rt.load(pack)  # memory-mapped: the mapping outlives the file
    module.set_num_threads(threads)
    return module


def quantization_step(model) -> float:
    """One quantization step of the first output when a DequantizeLinear writes it (0
    otherwise): a quantized model may round an element a step apart from onnxruntime,
    which fuses quantize-dequantize pairs into integer kernels (tests/e2e/test_corpus.py)."""
    from tests.e2e.test_corpus import _quantization_steps

    return _quantization_steps(model).get(model.graph.output[0].name, 0.0) * (1 + 1e-6)


def kernel_calls(fn, feeds) -> int:
    """Kernel calls one inference makes (loops counted per iteration)."""
    return kernel_profile(fn, feeds)[0]


def kernel_profile(fn, feeds) -> tuple[int, str]:
    """Kernel calls one inference makes (loops counted per iteration), and the kernel with
    the largest share of a run, with that share."""
    rows = fn.module.profile("main", feeds, runs=3, warmup=1)
    kernels = [r for r in rows if r.kind == "kernel"]
    top = max(kernels, key=lambda r: r.share, default=None)
    slowest = f"{top.name} {top.share:.0%}" if top else "-"
    return round(sum(r.calls for r in kernels)), slowest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5,
                   help="the runs of tcc's C runtime and of onnxruntime alternate in this many "
                        "rounds")
    p.add_argument("--models", default="", help="comma-separated subset")
    p.add_argument("--optimize-off", action="store_true",
                   help="also time the model compiled without the graph passes")
    p.add_argument("--corpus", action="store_true", help="add the real exports of `make corpus`")
    p.add_argument("--seq", type=int, default=CORPUS_SIZES["seq"],
                   help="the corpus exports' sequence length (their position tables hold 256)")
    args = p.parse_args(argv)
    CORPUS_SIZES["seq"] = args.seq
    import onnxruntime as ort

    import tcc

    wanted = set(filter(None, args.models.split(",")))
    off_head = f" {'no-opt ms (min-max)':>22s} {'kernels':>8s}" if args.optimize_off else ""
    rt = c_runtime()
    print(f"{'model':14s} {'compile s':>9s} {'tcc C ms (min-max)':>22s} {'ort ms (min-max)':>22s} "
          f"{'tcc/ort':>8s} {'tcc py ms (min-max)':>22s} {'kernels':>8s}{off_head}  slowest kernel")
    ratios = []
    for name, model, make_feeds in models(args.corpus):
        if wanted and name not in wanted:
            continue
        feeds = make_feeds(model, np.random.default_rng(0))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        try:
            fn = tcc.compile_onnx(model)
        except tcc.TccError as e:
            print(f"{name:14s} not compiled: {str(e)[:100]}")
            continue
        compile_s = time.perf_counter() - t0
        fn.module.set_num_threads(args.threads)
        want = sess.run(None, feeds)[0]
        got = fn(feeds)[0]
        atol = max(1e-4, quantization_step(model))
        if not np.allclose(got, want, rtol=1e-3, atol=atol):
            print(f"{name:14s} WRONG RESULT (max abs err {np.abs(got - want).max():.3g})")
            continue
        t_py = timed(lambda f=fn, x=feeds: f(x), args.runs)
        run_ort = lambda s=sess, x=feeds: s.run(None, x)  # noqa: E731
        run_tcc = lambda f=fn, x=feeds: f(x)  # noqa: E731
        if rt is not None:
            cm = c_module(rt, model, args.threads)
            arrays = [feeds[vi.name] for vi in model.graph.input if vi.name in feeds]
            if not np.allclose(cm.run("main", arrays)[0], want, rtol=1e-3, atol=atol):
                print(f"{name:14s} WRONG RESULT from the C runtime")
                continue
            run_tcc = lambda m=cm, a=arrays: m.run("main", a)  # noqa: E731
        t_tcc, t_ort = alternating(run_tcc, run_ort, args.runs, args.rounds)
        mt, mo = statistics.median(t_tcc), statistics.median(t_ort)
        off = ""
        if args.optimize_off:
            plain = tcc.compile_onnx(model, optimize=False)
            plain.module.set_num_threads(args.threads)
            t_off = timed(lambda f=plain, x=feeds: f(x), args.runs)
            off = (f" {statistics.median(t_off):9.2f} ({min(t_off):.1f}-{max(t_off):.1f})"
                   f" {kernel_calls(plain, feeds):8d}")
        c_col = f"{mt:9.2f} ({min(t_tcc):.1f}-{max(t_tcc):.1f})" if rt else f"{'-':>22s}"
        ratios.append(mt / mo)
        calls, slowest = kernel_profile(fn, feeds)
        print(f"{name:14s} {compile_s:9.2f} {c_col} "
              f"{mo:9.2f} ({min(t_ort):.1f}-{max(t_ort):.1f}) {mt / mo:8.2f} "
              f"{statistics.median(t_py):9.2f} ({min(t_py):.1f}-{max(t_py):.1f}) "
              f"{calls:8d}{off}  {slowest}", flush=True)
    if ratios:
        print(f"geomean tcc/ort over {len(ratios)} models: {geomean(ratios):.2f} "
              f"(worst {max(ratios):.2f})")
    return 0


def geomean(ratios) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


if __name__ == "__main__":
    sys.exit(main())
