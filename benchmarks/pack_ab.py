"""Two packs of the same corpus model raced in tccrt: a change's effect on run time.

    .venv/bin/python benchmarks/pack_ab.py A.tvmpack B.tvmpack --model gpt2_legacy
                                           [--seq 128] [--batch 1] [--runs 4000] [--rounds 10]

Compile the model once with each tcc (a worktree of the commit before a change, say, and the
change) and give both packs. They run on the same seeded inputs of the corpus model's spec
(tools/export_corpus.py) at --batch and --seq, with the same thread count; their outputs
must agree (rtol 1e-3, atol 1e-4 times the largest magnitude) before a time counts. Each is
timed by tccrt, which times its own runs, in `--rounds` rounds (at least 300 ms each), the
two taking turns and the first of a round alternating (ABBA), so that a shared machine's
drift reaches both. Prints each pack's median of the round medians with their spread, and
the ratio B / A of each round's medians: its median and spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from export_corpus import default_dir, example_inputs  # noqa: E402

from benchmarks.torch_vs_onnx import close, race  # noqa: E402
from benchmarks.tuning import cpu_name  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--model", required=True, help="the corpus model both packs compile")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--frames", type=int, default=16000)
    p.add_argument("--runs", type=int, default=4000, help="runs of each pack, over all rounds")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from tcc.cli.run_cmd import _make_runner

    spec = json.loads((default_dir() / f"{args.model}.json").read_text())
    feeds = example_inputs(spec["inputs"], {"batch": args.batch, "seq": args.seq,
                                            "frames": args.frames}, seed=0)
    runners = []
    for pack in (args.a, args.b):
        runner = _make_runner(pack, "main", "c")
        runner.set_num_threads(args.threads)
        runners.append(runner)
    outs = [r(feeds) for r in runners]
    if not all(close(got, want) for got, want in zip(outs[1], outs[0])):
        print(f"{args.b} does not compute what {args.a} does; no time counts")
        return 1
    medians = race((runners[0], feeds), (runners[1], feeds), args)
    ratios = [b / a for a, b in zip(*medians)]
    print(f"CPU: {cpu_name()}; threads {args.threads}; {args.model} at batch {args.batch}, "
          f"seq {args.seq}; tccrt, {args.rounds} rounds")
    for name, m in zip(("A", "B"), medians):
        print(f"{name}: {statistics.median(m):.4f} ms (rounds {min(m):.4f}-{max(m):.4f})")
    print(f"B/A: {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
