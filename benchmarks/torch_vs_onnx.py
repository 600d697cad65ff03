"""The pack from a torch.export program against the pack from the same model's ONNX exports.

    .venv/bin/python benchmarks/torch_vs_onnx.py [--runs 2000] [--rounds 10] [--threads 2]
                                                 [--models bert,wav2vec2]

For each program of the corpus (`make corpus`: NAME_pt2.pt2, tools/export_corpus.py) and each
ONNX export of the same architecture found beside it (NAME_dynamo.onnx, NAME_legacy.onnx),
both are compiled by tcc and run on the same seeded inputs (batch 2, sequence 64, 16000 audio
frames: inside the programs' dimension ranges) with the same thread count. Their first
outputs must agree with each other and with the program run by torch (rtol 1e-3, atol 1e-4
times the output's largest magnitude, in the C runtime loaded in this process) before a
time counts. They are timed by tccrt, the C runtime's command, which times its runs itself
(no Python in the timed loop: these packs run in 0.05-10 ms), in `--rounds` rounds of
`--runs` runs over all rounds (at least 300 ms a round); the two take turns within each
round, the first of a round alternating (ABBA), so that a shared machine's drift reaches
both. Prints each pair's median of the round medians with their spread, the ratio program /
ONNX of each round's medians (its median and spread: below 1, the program's pack is
faster), and the geomean of the median ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from export_corpus import MODELS, PROGRAMS, default_dir, example_inputs  # noqa: E402

from benchmarks.models import c_runtime, geomean  # noqa: E402

SIZES = {"batch": 2, "seq": 64, "frames": 16000}


def pairs(wanted: set[str]):
    """(family, program path, [ONNX paths]) for each exported program with an ONNX twin."""
    for name in PROGRAMS:
        family = name.removesuffix("_pt2")
        if wanted and family not in wanted:
            continue
        program = default_dir() / f"{name}.pt2"
        twins = [default_dir() / f"{m}.onnx" for m in MODELS
                 if m.rsplit("_", 1)[0] == family and (default_dir() / f"{m}.onnx").exists()]
        if program.exists() and twins:
            yield family, program, twins


def loaded(rt, source, threads: int, folder: Path):
    """`source` compiled to a pack in `folder`: (the pack loaded by the C runtime in this
    process, tccrt's runner of the same pack)."""
    import tcc
    from tcc.cli.run_cmd import _make_runner

    pack = Path(tempfile.mkdtemp(dir=folder)) / "model.tvmpack"
    tcc.compile(source, output=pack)
    module = rt.load(pack)
    module.set_num_threads(threads)
    runner = _make_runner(pack, "main", "c")
    runner.set_num_threads(threads)
    return module, runner


def race(program, onnx, args) -> tuple[list, list]:
    """Round medians (ms) of the two tccrt runners, `args.rounds` rounds, ABBA order."""
    from benchmarks.tuning import runs_per_round

    runs = max(runs_per_round(program[0], program[1], args, args.rounds),
               runs_per_round(onnx[0], onnx[1], args, args.rounds))
    medians: tuple[list, list] = ([], [])
    for k in range(args.rounds):
        order = (0, 1) if k % 2 == 0 else (1, 0)
        for i in order:
            runner, feeds = (program, onnx)[i]
            medians[i].append(runner.bench(feeds, runs)[0])
    return medians


def close(got, want) -> bool:
    atol = 1e-4 * max(float(np.max(np.abs(want))), 1.0)
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=atol)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2000, help="runs of each pack, over all rounds")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", default="", help="comma-separated families (bert, wav2vec2, ...)")
    args = p.parse_args(argv)
    import onnx
    import torch

    from benchmarks.tuning import cpu_name

    torch.set_num_threads(args.threads)
    rt = c_runtime()
    if rt is None:
        return 1
    print(f"CPU: {cpu_name()}; threads {args.threads}; tccrt, {args.rounds} rounds")
    print(f"{'program':18s} {'ONNX export':22s} {'program ms (min-max)':>22s} "
          f"{'ONNX ms (min-max)':>22s} {'program/ONNX (min-max)':>24s}")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for _family, program_path, twins in pairs(set(filter(None, args.models.split(",")))):
            spec = json.loads(program_path.with_suffix(".json").read_text())["inputs"]
            feeds = example_inputs(spec, SIZES, seed=0)
            arrays = [feeds[s["name"]] for s in spec]
            program = torch.export.load(str(program_path))
            with torch.no_grad():
                want = program.module()(*[torch.from_numpy(a) for a in arrays])
            want = (want[0] if isinstance(want, (list, tuple)) else want).numpy()
            module, program_runner = loaded(rt, program_path, args.threads, Path(folder))
            if not close(module.run("main", arrays)[0], want):
                print(f"{program_path.stem:18s} WRONG RESULT against torch")
                continue
            names = [s["name"] for s in program_runner.signature["inputs"]]  # the program's order
            program_feeds = dict(zip(names, arrays))
            for twin in twins:
                model = onnx.load(str(twin))
                onnx_feeds = {vi.name: feeds[vi.name] for vi in model.graph.input if vi.name in feeds}
                module, onnx_runner = loaded(rt, model, args.threads, Path(folder))
                if not close(module.run("main", list(onnx_feeds.values()))[0], want):
                    print(f"{program_path.stem:18s} {twin.stem:22s} WRONG RESULT from the ONNX pack")
                    continue
                t_prog, t_onnx = race((program_runner, program_feeds), (onnx_runner, onnx_feeds), args)
                per_round = [a / b for a, b in zip(t_prog, t_onnx)]
                ratio = statistics.median(per_round)
                ratios.append(ratio)
                print(f"{program_path.stem:18s} {twin.stem:22s} "
                      f"{statistics.median(t_prog):9.3f} ({min(t_prog):.3f}-{max(t_prog):.3f}) "
                      f"{statistics.median(t_onnx):9.3f} ({min(t_onnx):.3f}-{max(t_onnx):.3f}) "
                      f"{ratio:11.2f} ({min(per_round):.2f}-{max(per_round):.2f})", flush=True)
    if ratios:
        print(f"geomean program/ONNX over {len(ratios)} pairs: {geomean(ratios):.2f} "
              f"(worst {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
