"""The pack from a torch.export program against the pack from the same model's ONNX exports.

    .venv/bin/python benchmarks/torch_vs_onnx.py [--runs 40] [--rounds 8] [--threads 2]
                                                 [--models bert,wav2vec2]

For each program of the corpus (`make corpus`: NAME_pt2.pt2, tools/export_corpus.py) and each
ONNX export of the same architecture found beside it (NAME_dynamo.onnx, NAME_legacy.onnx),
both are compiled by tcc and run in tcc's C runtime on the same seeded inputs (batch 2,
sequence 64, 16000 audio frames: inside the programs' dimension ranges) with the same thread
count, in alternating rounds so that a shared machine's drift reaches both. Their first
outputs must agree with each other and with the program run by torch (rtol 1e-3, atol 1e-4
times the output's largest magnitude) before a time counts. Prints each pair's medians,
spreads and the ratio program / ONNX (below 1: the program's pack is faster), and the
geomean of the ratios.
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

from benchmarks.models import alternating, c_runtime, geomean  # noqa: E402

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


def loaded(rt, source, threads: int):
    import tcc

    with tempfile.TemporaryDirectory() as d:
        pack = Path(d) / "model.tvmpack"
        tcc.compile(source, output=pack)
        module = rt.load(pack)
    module.set_num_threads(threads)
    return module


def close(got, want) -> bool:
    atol = 1e-4 * max(float(np.max(np.abs(want))), 1.0)
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=atol)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", default="", help="comma-separated families (bert, wav2vec2, ...)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    rt = c_runtime()
    if rt is None:
        return 1
    print(f"{'program':18s} {'ONNX export':22s} {'program ms (min-max)':>22s} "
          f"{'ONNX ms (min-max)':>22s} {'program/ONNX':>12s}")
    ratios = []
    for _family, program_path, twins in pairs(set(filter(None, args.models.split(",")))):
        spec = json.loads(program_path.with_suffix(".json").read_text())["inputs"]
        feeds = example_inputs(spec, SIZES, seed=0)
        arrays = [feeds[s["name"]] for s in spec]
        program = torch.export.load(str(program_path))
        with torch.no_grad():
            want = program.module()(*[torch.from_numpy(a) for a in arrays])
        want = (want[0] if isinstance(want, (list, tuple)) else want).numpy()
        from_program = loaded(rt, program_path, args.threads)
        if not close(from_program.run("main", arrays)[0], want):
            print(f"{program_path.stem:18s} WRONG RESULT against torch")
            continue
        for twin in twins:
            import onnx

            model = onnx.load(str(twin))
            onnx_arrays = [feeds[vi.name] for vi in model.graph.input if vi.name in feeds]
            from_onnx = loaded(rt, model, args.threads)
            if not close(from_onnx.run("main", onnx_arrays)[0], want):
                print(f"{program_path.stem:18s} {twin.stem:22s} WRONG RESULT from the ONNX pack")
                continue
            t_prog, t_onnx = alternating(lambda m=from_program, a=arrays: m.run("main", a),
                                         lambda m=from_onnx, a=onnx_arrays: m.run("main", a),
                                         args.runs, args.rounds)
            mp, mo = statistics.median(t_prog), statistics.median(t_onnx)
            ratios.append(mp / mo)
            print(f"{program_path.stem:18s} {twin.stem:22s} "
                  f"{mp:9.3f} ({min(t_prog):.3f}-{max(t_prog):.3f}) "
                  f"{mo:9.3f} ({min(t_onnx):.3f}-{max(t_onnx):.3f}) {mp / mo:12.2f}", flush=True)
    if ratios:
        print(f"geomean program/ONNX over {len(ratios)} pairs: {geomean(ratios):.2f} "
              f"(worst {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
