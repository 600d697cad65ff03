"""How long `tcc compile` takes, stage by stage, cold and from a warm compile cache; and what
LLVM's optimization level costs in compile time and gives in latency.

    .venv/bin/python benchmarks/compile_time.py [--models resnet50,densenet121]
                                                [--variants O3] [--runs 20] [--threads 2]
                                                [--command [--rounds 3]]

With `--command`, each model is written to an .onnx file and `tcc compile` runs as a command
(wall time, Python's start and imports included), `--rounds` times each of: cold (a fresh
cache folder), warm kernels (every kernel from the kernel cache, the pack cache off:
TCC_PACK_CACHE_MB=0) and a pack-cache hit; min and median per kind. One untimed compile
first writes Python's bytecode caches and reads the model into the page cache, as a user's
earlier compile would have.

A variant names LLVM's settings: `O<level>` (tcc.emit.llvm.OPT_LEVEL; tcc compiles at O3),
with `-no-unroll` for LLVM's loop unroller off (tcc.emit.llvm.LLVM_UNROLL) and `-no-lsr` for
its loop strength reduction off (tcc.emit.llvm.LLVM_LSR). For each model
and each variant of `--variants`, the model is compiled twice into a fresh cache folder:
cold (every kernel scheduled and compiled, by as many processes as this process has cores)
and warm (every kernel from the cache); the two packs must be byte-identical. The stage
times are those `tcc compile -v` prints; `wall` is the in-process total (the CLI adds
Python's start and imports, 0.7-1.4 s: docs/compile.md §6). With more than one variant, each variant's pack
runs in the C runtime, interleaved run by run with the others on the same inputs, and its
median latency is given as a ratio to the first variant's, with the spread (min-max) of the
per-run ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import LIGHT, c_runtime, models  # noqa: E402
from benchmarks.tuning import cpu_name  # noqa: E402

STAGES = ("import", "optimize", "legalize", "vm", "kernels", "pack")


def parse_variant(text: str) -> tuple[int, bool, bool]:
    """`O3` -> (3, True, True); `O2-no-unroll` -> (2, False, True); `O3-no-lsr` -> (3, True,
    False): the level, LLVM's loop unroller on, its loop strength reduction on."""
    level, *rest = text.replace("no-", "no_").split("-")
    if (len(level) != 2 or level[0] != "O" or level[1] not in "0123"
            or not set(rest) <= {"no_unroll", "no_lsr"} or len(set(rest)) < len(rest)):
        raise ValueError(f"bad variant {text!r}: write O0..O3, optionally with -no-unroll "
                         "and -no-lsr")
    return int(level[1]), "no_unroll" not in rest, "no_lsr" not in rest


def compile_once(model, cache_dir: Path, variant: str):
    from tcc.api import StageTimes, compile_to_bytes
    from tcc.emit import llvm

    os.environ["TCC_CACHE_DIR"] = str(cache_dir)
    llvm.OPT_LEVEL, llvm.LLVM_UNROLL, llvm.LLVM_LSR = parse_variant(variant)
    times = StageTimes()
    t0 = time.perf_counter()
    data = compile_to_bytes(model, times=times)
    return data, time.perf_counter() - t0, times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,squeezenet,densenet121,bert,gpt2")
    p.add_argument("--variants", default="O3",
                   help="comma-separated LLVM settings (O3, O2-no-unroll, ...), first is the base")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--command", action="store_true",
                   help="time `tcc compile` as a command: cold, warm kernels, pack-cache hit")
    p.add_argument("--rounds", type=int, default=3, help="with --command: runs of each kind")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        try:
            parse_variant(v)
        except ValueError as e:
            p.error(str(e))
    wanted = [m for m in args.models.split(",") if m]
    known = {name for name, *_ in models()}
    unknown = [m for m in wanted if m not in known]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: bert, gpt2, {', '.join(LIGHT)}")
    print(f"cores: {len(os.sched_getaffinity(0))}, CPU: {cpu_name()}")
    if args.command:
        return _commands([(n, m) for n, m, _ in models() if n in wanted], args.rounds)
    rt = c_runtime() if len(variants) > 1 else None
    width = max(len(v) for v in variants)
    print(f"{'model':12s} {'':{width}s} {'':5s} " + " ".join(f"{s:>8s}" for s in STAGES)
          + f" {'wall s':>7s} {'cached':>7s}")
    for name, model, make_feeds in models():
        if name not in wanted:
            continue
        packs = {}
        for variant in variants:
            with tempfile.TemporaryDirectory() as cache:
                cold, cold_s, cold_t = compile_once(model, Path(cache), variant)
                warm, warm_s, warm_t = compile_once(model, Path(cache), variant)
            if cold != warm:
                print(f"{name:12s} {variant}: the warm pack differs from the cold one")
                return 1
            for label, s, t in (("cold", cold_s, cold_t), ("warm", warm_s, warm_t)):
                stages = " ".join(f"{t.seconds.get(st, 0.0):8.2f}" for st in STAGES)
                print(f"{name:12s} {variant:{width}s} {label:5s} {stages} {s:7.2f} "
                      f"{t.kernels_cached:3d}/{t.kernels_cached + t.kernels_compiled:<3d}", flush=True)
            packs[variant] = cold
        if rt is not None:
            _race(rt, name, model, make_feeds, packs, variants, args)
    return 0


def _timed_compile(name: str, source: Path, cache: Path, extra: dict, check: str) -> float:
    """Seconds `tcc compile -v SOURCE` took as a command, with `cache` as its cache folder
    and `extra` in its environment; its output must contain `check`."""
    import subprocess

    tcc = [sys.executable, "-c", "import sys; from tcc.cli.entry import main; sys.exit(main())"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    out = subprocess.run([*tcc, "compile", "-v", str(source), "-o", str(source.with_suffix(".tvmpack"))],
                         env={**env, "TCC_CACHE_DIR": str(cache), **extra},
                         capture_output=True, text=True, check=True).stdout
    took = time.perf_counter() - t0
    if check not in out:
        raise SystemExit(f"{name}: expected {check!r} in:\n{out}")
    return took


def _commands(named_models, rounds: int) -> int:
    import onnx

    print(f"{'model':12s} {'kind':14s} {'min s':>6s} {'median s':>8s}  runs")
    for name, model in named_models:
        with tempfile.TemporaryDirectory() as d:
            source = Path(d) / f"{name}.onnx"
            onnx.save(model, source)
            _timed_compile(name, source, Path(d) / "first", {}, "compiled")
            times = {"cold": [], "warm kernels": [], "pack cache hit": []}
            for k in range(rounds):
                cache = Path(d) / f"cache{k}"
                times["cold"].append(_timed_compile(name, source, cache, {}, "0 of"))
                times["warm kernels"].append(
                    _timed_compile(name, source, cache, {"TCC_PACK_CACHE_MB": "0"}, "kernel(s) from"))
                times["pack cache hit"].append(
                    _timed_compile(name, source, cache, {}, "from the pack cache"))
            for kind, ts in times.items():
                print(f"{name:12s} {kind:14s} {min(ts):6.2f} {statistics.median(ts):8.2f}  "
                      + " ".join(f"{t:.2f}" for t in ts), flush=True)
    return 0


def _race(rt, name, model, make_feeds, packs, variants, args) -> None:
    feeds = make_feeds(model, np.random.default_rng(0))
    arrays = [feeds[vi.name] for vi in model.graph.input if vi.name in feeds]
    modules = {}
    with tempfile.TemporaryDirectory() as d:
        for variant, data in packs.items():
            path = Path(d) / f"{variant}.tvmpack"
            path.write_bytes(data)
            modules[variant] = rt.load(path)
            modules[variant].set_num_threads(args.threads)
    outs = {variant: m.run("main", arrays)[0] for variant, m in modules.items()}  # and warm up
    times = {variant: [] for variant in variants}
    for _ in range(args.runs):
        for variant in variants:
            t0 = time.perf_counter()
            modules[variant].run("main", arrays)
            times[variant].append(time.perf_counter() - t0)
    base = variants[0]
    for variant in variants:
        ratios = [a / b for a, b in zip(times[variant], times[base])]
        same = np.allclose(outs[variant], outs[base], rtol=1e-4, atol=1e-5)
        print(f"{name:12s} {variant}: {statistics.median(times[variant]) * 1e3:8.2f} ms, "
              f"x{statistics.median(ratios):.3f} of {base} ({min(ratios):.2f}-{max(ratios):.2f})"
              f"{'' if same else ', OUTPUTS DIFFER'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
