"""tcc tune, measured: search quality, tuned kernels, tuned models (one run each, CPU named).

    .venv/bin/python benchmarks/tuning.py search  [--trials 500] [--png curve.png] [--pack-rounds 7]
    .venv/bin/python benchmarks/tuning.py kernels [--trials 300]
    .venv/bin/python benchmarks/tuning.py models  [--trials 2000] [--budget 20m]
                                                  [--models resnet50,shufflenet,...]

* search: for tasks of different kinds, the cost-model-guided evolutionary search and
  random search, each with its own fresh database, at equal trials; the best speedup over
  the default after each trial, as text (and a PNG when matplotlib is installed), and
  trials per second. Then the two bests are compared twice, each time alternating: their
  kernels in one measurement worker, and their packs (with the untuned pack) run by the C
  runtime. A task is one kernel (a one-node model), or with `model:NAME` a whole model (a
  light model, a builder or a corpus export, at batch 1 and sequence 128) whose kernels
  share the trials, judged by the estimate of one run and by the packs. With --seeds N,
  each task is searched N times by each search (seeds 0..N-1), and the packs' verdicts are
  counted.
* kernels: one-node models (fp32 matmul 1024^3, a MobileNet-style depthwise 3x3, a 1x1
  convolution, a strided conv1d, a layer norm); each is tuned (with the in-model check),
  then its default pack, its tuned pack (C runtime: tccrt's own --bench timing, so no
  Python in the timed loop; needs `make runtime`) and onnxruntime run on the same inputs
  and threads; the matmul is also timed against numpy/OpenBLAS.
* models: each model (by default real exports of six families from the corpus that
  tools/export_corpus.py writes, and ShuffleNet from the onnx package; symbolic sizes at
  batch 1, sequence 128) is tuned (`tcc tune` with --trials/--budget, then its in-model
  check), then the untuned pack, the tuned pack (C runtime) and onnxruntime are timed in
  one run; outputs are checked against onnxruntime first (rtol 1e-3, atol 1e-4), so a fast
  wrong answer never counts.

Timings are medians of --runs with their min-max spread. OPENBLAS_NUM_THREADS and the
kernels' threads are set to --threads before anything loads.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["search", "kernels", "models"])
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--budget", default=None, help="models: per-model tuning budget (20m)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pack-rounds", type=int, default=7,
                   help="search: alternating rounds of the untuned and tuned packs")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--tasks", default="matmul1024,conv3x3,attention_bmm,depthwise",
                   help=f"search: some of {','.join(SEARCH_TASKS)}, or model:NAME for a "
                   "whole model of benchmarks/models.py (model:resnet_legacy)")
    p.add_argument("--kernels", default=",".join(KERNELS))
    p.add_argument("--models", default="resnet_legacy,mobilenet_v2_legacy,shufflenet,"
                   "bert_legacy,gpt2_legacy,vit_dynamo")
    p.add_argument("--seeds", type=int, default=1,
                   help="search: run both searches with each of this many seeds")
    p.add_argument("--png", default=None, help="search: write the curves here")
    p.add_argument("--keep", default=None, help="a folder for the databases (else temporary)")
    return p.parse_args(argv)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def one_node(op: str, x: list, w: list | None, out_dims: int | None = None, **attrs):
    """A one-node ONNX model with a seeded constant weight."""
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper

    rng = np.random.default_rng(0)
    inputs, inits = ["x"], []
    if w is not None:
        inputs.append("w")
        inits.append(helper.make_tensor("w", TP.FLOAT, w, rng.standard_normal(
            int(np.prod(w))).astype(np.float32).tolist()))
    node = helper.make_node(op, inputs, ["y"], **attrs)
    g = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TP.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def layer_norm_model(rows: int, cols: int):
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper

    rng = np.random.default_rng(0)
    inits = [helper.make_tensor(n, TP.FLOAT, [cols], rng.standard_normal(cols).tolist())
             for n in ("g", "b")]
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    g = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TP.FLOAT, [rows, cols])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


KERNELS = {
    "matmul": lambda: one_node("MatMul", [1024, 1024], [1024, 1024]),
    "depthwise": lambda: one_node("Conv", [1, 144, 56, 56], [144, 1, 3, 3], group=144,
                                  pads=[1, 1, 1, 1]),
    "conv1x1": lambda: one_node("Conv", [1, 64, 56, 56], [256, 64, 1, 1]),
    "conv1d": lambda: one_node("Conv", [1, 512, 3199], [512, 512, 3], strides=[2]),
    "layer_norm": lambda: layer_norm_model(512, 768),
}
SEARCH_TASKS = {"matmul": lambda: one_node("MatMul", [256, 512], [512, 512]),
                "matmul1024": KERNELS["matmul"],
                "conv3x3": lambda: one_node("Conv", [1, 64, 56, 56], [64, 64, 3, 3],
                                            pads=[1, 1, 1, 1]),
                "attention_bmm": lambda: one_node("MatMul", [12, 128, 64], [12, 64, 128]),
                # ResNet-50's stride-2 3 x 3 conv (stage 3's first) and a 1 x 1 conv with
                # deep input (stage 4's 1024 -> 256): defaults well off their spaces' best
                # on an Intel Xeon (1.85x and 1.24x after 130-250 trials)
                "conv3x3_s2": lambda: one_node("Conv", [1, 128, 56, 56], [128, 128, 3, 3],
                                               strides=[2, 2], pads=[1, 1, 1, 1]),
                "conv1x1_deep": lambda: one_node("Conv", [1, 1024, 14, 14], [256, 1024, 1, 1]),
                # SqueezeNet's first expand 3 x 3: 16 channels in, too few for Winograd
                "conv3x3_narrow": lambda: one_node("Conv", [1, 16, 55, 55], [64, 16, 3, 3],
                                                   pads=[1, 1, 1, 1]),
                # AlexNet's second conv: 2 groups of 48 -> 128 channels, 5 x 5, in NCHW16c
                "conv_grouped": lambda: one_node("Conv", [1, 96, 27, 27], [256, 48, 5, 5],
                                                 group=2, pads=[2, 2, 2, 2]),
                **{k: v for k, v in KERNELS.items() if k != "matmul"}}


def tuning_sizes(model) -> dict:
    """`--shape`-style sizes to tune a model at: benchmarks/models.py's CORPUS_SIZES for the
    symbolic dimensions its inputs name (batch 1, sequence 128)."""
    from models import CORPUS_SIZES

    symbolic = {d.dim_param for vi in model.graph.input
                for d in vi.type.tensor_type.shape.dim if d.dim_param}
    return {k: [v] for k, v in CORPUS_SIZES.items() if k in symbolic}


def search_task(name: str):
    """(model, sizes to tune at, feeds(rng)) of a search task: a one-node model of
    SEARCH_TASKS, or with `model:NAME` a whole model of benchmarks/models.py, whose kernels
    share the trials (the task scheduler decides which kernel gets each round)."""
    import numpy as np

    if not name.startswith("model:"):
        model = SEARCH_TASKS[name]()
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        return model, {}, lambda rng: {"x": rng.standard_normal(shape).astype(np.float32)}
    from models import models

    wanted = name.removeprefix("model:")
    for found, model, feeds_of in models(corpus=True):
        if found == wanted:
            return model, tuning_sizes(model), lambda rng, m=model, f=feeds_of: f(m, rng)
    raise SystemExit(f"--tasks: no model {wanted!r} (light models, builders, and the corpus "
                     "that tools/export_corpus.py writes)")


def lowered(model, target):
    from tcc.api import lower
    from tcc.frontend.onnx import from_onnx
    from tcc.lower.passes import run_pipeline

    return lower(run_pipeline(from_onnx(model), target=target))


def tune(model, target, db_path: Path, trials: int, search="evolutionary", budget=None,
         on_trial=lambda p: None, named=None, seed: int = 0, model_check: bool = False):
    """Tune as `tcc tune` does (ending with its in-model check when `model_check`): the
    tuner, its progress and the seconds it took, the check's included."""
    from tcc.tune.database import Database
    from tcc.tune.model_check import check_model
    from tcc.tune.shapes import kernel_shapes
    from tcc.tune.tuner import Tuner

    mod = lowered(model, target)
    sizes, inputs = kernel_shapes(mod, target, named or {})
    tuner = Tuner(mod, target, Database(db_path), sizes, search=search, seed=seed)
    deadline = None if budget is None else time.monotonic() + budget
    start = time.monotonic()
    progress = tuner.run(trials, deadline, on_trial)
    if model_check and not progress.interrupted:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = check_model(mod, target, tuner.db, inputs, Path(tmp))
        if verdict is not None:
            kept = verdict.variants[verdict.chosen]["tuned"]
            times = ", ".join(f"{v['tuned']}: {m:.4f} ms"
                              for v, m in zip(verdict.variants, verdict.medians()))
            print(f"  in-model check: keeps {kept} of {verdict.variants[0]['tuned']} tuned "
                  f"kernels (model time by kernels kept: {times})", flush=True)
    return tuner, progress, time.monotonic() - start


def _stats(ms: list[float]) -> str:
    return f"{statistics.median(ms):9.3f} ({min(ms):.3f}-{max(ms):.3f})"


def remeasure(tuners: dict, target, rounds: int = 5) -> dict:
    """Each tuner's speedup over the default schedules, its best schedules measured again in
    one worker, each paired with the default and the searches alternating round by round:
    run-to-run drift does not decide which search won."""
    import statistics as st

    from tcc.tune.apply import replay
    from tcc.tune.measure import KernelBench
    from tcc.tune.tuner import CONFIRM_REPEATS

    default_total, totals = 0.0, dict.fromkeys(tuners, 0.0)
    first = next(iter(tuners.values()))
    for k, state in enumerate(first.states):
        bests = {}
        for name, tuner in tuners.items():
            record = tuner.db.best(tuner.states[k].task.workload, tuner.target_text)
            bests[name] = replay(state.task.func, record.trace)
        bench = KernelBench(state.space.realize({}).func, state.space.shapes, target)
        try:
            ratios = {name: [] for name in bests}
            for _ in range(rounds):
                for name, func in bests.items():
                    ratios[name].append(bench.measure([func], CONFIRM_REPEATS)[0].ratio(
                        bench.default_latency))
        finally:
            bench.worker.close()
        default = state.task.weight * bench.default_latency
        default_total += default
        for name in bests:
            totals[name] += default * st.median(ratios[name])
    return {name: default_total / total for name, total in totals.items()}


def packs_line(task, model, feeds, target, finalists: dict, args, rounds: int = 7) -> str:
    """The untuned pack and each search's tuned pack, run by tccrt on the same input in
    `rounds` alternating rounds: the speedup a user of each tuned pack gets. The worker's
    figures above time the kernel alone; the pack adds the runtime's copies and calls."""
    import numpy as np

    runners = {"untuned": pack_runner(model, target, None, args.threads)}
    for name, tuner in finalists.items():
        runners[name] = pack_runner(model, target, tuner.db.path, args.threads)
    want = runners["untuned"](feeds)[0]
    for name, runner in runners.items():
        if not np.allclose(runner(feeds)[0], want, rtol=1e-3, atol=1e-4):
            return f"{task:12s} the {name} pack is WRONG", None
    runs = runs_per_round(runners["untuned"], feeds, args, rounds)
    t = alternating({name: (lambda r=runner: r.bench(feeds, runs)[0])
                     for name, runner in runners.items()}, rounds)
    med = {name: v[0] for name, v in t.items()}
    parts = [f"{name} {_spread(v)} ms" for name, v in t.items()]
    ratio = med["random"] / med["evolutionary"]
    return (f"{task:12s} packs (tccrt, {rounds} alternating rounds): " + ", ".join(parts)
            + f"; speedup random {med['untuned'] / med['random']:.2f}x, evolutionary "
            f"{med['untuned'] / med['evolutionary']:.2f}x (evolutionary / random "
            f"{ratio:.2f})"), ratio


def search_mode(args, target, work: Path) -> None:
    import numpy as np

    trials = args.trials or 500
    curves = {}
    print(f"{'task':12s} {'search':13s} {'trials':>6s} {'trials/s':>8s} {'default us':>10s} "
          f"{'best us':>9s} {'speedup':>8s}  (speedup over the default schedule, as confirmed)")
    wins = {}  # task -> [evolutionary / random of the packs, per seed]
    for task in args.tasks.split(","):
        for seed in range(args.seeds):
            label = task if args.seeds == 1 else f"{task}#{seed}"
            model, named, feeds_of = search_task(task)
            finalists = {}
            for search in ("random", "evolutionary"):
                curve = []

                def on_trial(p, curve=curve):
                    if all(s.default_seconds for s in p.states):
                        curve.append((p.trials, p.estimate(best=False) / p.estimate()))

                db = work / f"search-{task.replace(':', '-')}-{search}-{seed}.db"
                db.unlink(missing_ok=True)
                tuner, progress, seconds = tune(model, target, db, trials, search,
                                                on_trial=on_trial, named=named, seed=seed)
                curves[(label, search)] = curve
                finalists[search] = tuner
                default = progress.estimate(best=False)
                best = progress.estimate()
                print(f"{label:12s} {search:13s} {progress.trials:6d} "
                      f"{progress.trials / seconds:8.2f} {default * 1e6:10.1f} "
                      f"{best * 1e6:9.1f} {default / best:7.2f}x", flush=True)
            again = remeasure(finalists, target)
            print(f"{label:12s} the two bests measured again, alternately, in one worker: "
                  f"speedup random {again['random']:.2f}x, evolutionary "
                  f"{again['evolutionary']:.2f}x (evolutionary / random "
                  f"{again['evolutionary'] / again['random']:.2f})", flush=True)
            feeds = feeds_of(np.random.default_rng(1))
            line, ratio = packs_line(label, model, feeds, target, finalists, args,
                                     args.pack_rounds)
            print(line, flush=True)
            wins.setdefault(task, []).append(ratio)
    if args.seeds > 1:
        print("\nevolutionary / random, tuned packs, per seed (above 1: evolutionary faster)")
        for task, ratios in wins.items():
            shown = " ".join("wrong" if r is None else f"{r:.2f}" for r in ratios)
            won = sum(1 for r in ratios if r is not None and r > 1)
            print(f"{task:12s} {shown}   evolutionary faster in {won} of {len(ratios)}")
    marks = [m for m in (10, 25, 50, 100, 200, 300, 400, 500, 1000, 2000) if m <= trials]
    print("\nspeedup over the default schedule after N trials")
    print(f"{'task':12s} {'search':13s} " + " ".join(f"{m:>7d}" for m in marks))
    for (task, search), curve in curves.items():
        row = []
        for m in marks:
            seen = [v for t, v in curve if t <= m]
            row.append(f"{max(seen):7.2f}" if seen else f"{'-':>7s}")
        print(f"{task:12s} {search:13s} " + " ".join(row))
    if args.png:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("(no matplotlib: no PNG)")
            return
        tasks = list(dict.fromkeys(label for label, _ in curves))
        fig, axes = plt.subplots(1, len(tasks), figsize=(max(6, 4 * len(tasks)), 3.4))
        for ax, task in zip(axes if len(tasks) > 1 else [axes], tasks):
            for search in ("random", "evolutionary"):
                curve = curves[(task, search)]
                best, xs, ys = 0.0, [], []
                for t, v in curve:
                    best = max(best, v)
                    xs.append(t)
                    ys.append(best)
                ax.step(xs, ys, where="post", label=search)
            ax.set_title(task)
            ax.set_xlabel("trials")
            ax.set_ylabel("speedup over default")
            ax.legend()
        fig.suptitle(f"tcc tune: best speedup vs trials ({cpu_name()}, {args.threads} threads)",
                     fontsize=9)
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"wrote {args.png}")


def pack_runner(model, target, db: Path | None, threads: int):
    """The model's pack (tuned by `db`, or untuned) run by the C runtime's tccrt, which
    times its runs itself (no Python in the timed loop)."""
    from tcc.api import compile_to_bytes
    from tcc.cli.run_cmd import _make_runner

    pack = Path(tempfile.mkdtemp()) / "m.tvmpack"
    pack.write_bytes(compile_to_bytes(model, str(target), db=db))
    runner = _make_runner(pack, "main", "c")
    runner.set_num_threads(threads)
    return runner


def _spread(median_lo_hi) -> str:
    median, lo, hi = median_lo_hi
    return f"{median:9.3f} ({lo:.3f}-{hi:.3f})"


ROUND_MS, MAX_RUNS = 300.0, 5000


def runs_per_round(runner, feeds, args, rounds: int) -> int:
    """Runs a round: --runs over the rounds, and enough that a round lasts ROUND_MS. tccrt
    starts a fresh process per round, and the median of a few runs after its one warm-up
    run is still cold (a 0.075 ms layer norm measured 0.5 ms at 6 runs a round)."""
    per_run = runner.bench(feeds, 20)[0]
    return min(MAX_RUNS, max(1, args.runs // rounds, math.ceil(ROUND_MS / max(per_run, 1e-3))))


def alternating(contenders: dict, rounds: int) -> dict:
    """Each contender (a function giving one round's median ms) run once a round, in turn:
    on a shared machine the speed drifts over minutes, and alternating gives every contender
    the same drift. (median of the round medians, min, max) for each."""
    medians = {k: [] for k in contenders}
    for _ in range(rounds):
        for k, fn in contenders.items():
            medians[k].append(fn())
    return {k: (statistics.median(v), min(v), max(v)) for k, v in medians.items()}


def time_model(name, model, target, db, feeds, args, sess, numpy_fn=None, rounds=5) -> str:
    """The untuned pack, the tuned pack and onnxruntime (and numpy) timed in `rounds`
    alternating rounds of --runs / rounds runs each (more where a round would last under
    ROUND_MS): on a shared machine the speed drifts over minutes, and alternating gives
    every contender the same drift. Each figure is the median of the round medians, with
    the rounds' min-max."""
    import numpy as np
    from models import timed

    want = sess.run(None, feeds)[0]
    untuned = pack_runner(model, target, None, args.threads)
    tuned = pack_runner(model, target, db, args.threads)
    for label, runner in (("untuned", untuned), ("tuned", tuned)):
        got = runner(feeds)[0]
        if not np.allclose(got, want, rtol=1e-3, atol=1e-4):
            return f"{name}: {label} pack WRONG (max abs err {np.abs(got - want).max():.3g})"
    runs = runs_per_round(untuned, feeds, args, rounds)
    contenders = {"untuned": lambda: untuned.bench(feeds, runs)[0],
                  "tuned": lambda: tuned.bench(feeds, runs)[0],
                  "ort": lambda: statistics.median(timed(lambda: sess.run(None, feeds), runs))}
    if numpy_fn is not None:
        contenders["numpy"] = lambda: statistics.median(timed(numpy_fn, runs))
    t = alternating(contenders, rounds)
    line = (f"{name:12s} untuned {_spread(t['untuned'])}  tuned {_spread(t['tuned'])}  "
            f"ort {_spread(t['ort'])}  tuned/untuned {t['tuned'][0] / t['untuned'][0]:5.2f}  "
            f"tuned/ort {t['tuned'][0] / t['ort'][0]:5.2f}")
    if numpy_fn is not None:
        line += f"  numpy {_spread(t['numpy'])}  numpy/tuned {t['numpy'][0] / t['tuned'][0]:5.2f}"
    return line


def ort_session(model, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def kernels_mode(args, target, work: Path) -> None:
    import numpy as np

    trials = args.trials or 300
    for name in args.kernels.split(","):
        model = KERNELS[name]()
        db = work / f"kernel-{name}.db"
        db.unlink(missing_ok=True)
        _, progress, seconds = tune(model, target, db, trials, model_check=True)
        kernels = ", ".join(f"{s.task.name} {s.speedup:.2f}x" for s in progress.states
                            if s.speedup)
        print(f"{name}: {progress.trials} trials in {seconds:.0f} s; tuned/default per kernel: "
              f"{kernels}", flush=True)
        feeds = {"x": np.random.default_rng(1).standard_normal(
            [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        ).astype(np.float32)}
        numpy_fn = None
        if name == "matmul":
            w = np.asarray(__import__("onnx").numpy_helper.to_array(model.graph.initializer[0]))
            numpy_fn = lambda x=feeds["x"], w=w: x @ w  # noqa: E731
        print(time_model(name, model, target, db, feeds, args,
                         ort_session(model, args.threads), numpy_fn), flush=True)


def models_mode(args, target, work: Path) -> None:
    import numpy as np
    from models import models

    from tcc.cli.tune_cmd import parse_budget

    wanted = args.models.split(",")
    trials = args.trials or 2000
    budget = parse_budget(args.budget) if args.budget else None
    found = set()
    for name, model, feeds_of in models(corpus=True):
        if name not in wanted:
            continue
        found.add(name)
        db = work / f"model-{name}.db"
        _, progress, seconds = tune(model, target, db, trials, budget=budget,
                                    named=tuning_sizes(model), model_check=True)
        print(f"{name}: {progress.trials} trials in {seconds:.0f} s "
              f"({progress.trials / max(seconds, 1e-9):.2f}/s); kernel time of one run: "
              f"default {progress.estimate(best=False) * 1e6:.1f} us, "
              f"tuned {progress.estimate() * 1e6:.1f} us", flush=True)
        feeds = feeds_of(model, np.random.default_rng(0))
        print(time_model(name, model, target, db, feeds, args,
                         ort_session(model, args.threads)), flush=True)
    for name in wanted:
        if name not in found:
            print(f"{name}: no such model (light models, builders, and the corpus that "
                  "tools/export_corpus.py writes)")


def main(argv=None) -> int:
    args = _args(argv)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.pop("OPENBLAS_CORETYPE", None)  # numpy picks its kernels for this CPU
    from tcc.target import host_target

    target = host_target()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; threads {args.threads}")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tcc-tuning-"))
    work.mkdir(parents=True, exist_ok=True)
    modes = {"search": search_mode, "kernels": kernels_mode, "models": models_mode}
    modes[args.mode](args, target, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
