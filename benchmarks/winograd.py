"""Winograd F(4x4, 3x3) against direct convolution, and both against onnxruntime, in one run.

    .venv/bin/python benchmarks/winograd.py [--convs 64:64:56,128:128:28,...]
                                            [--models resnet50,vgg19,inception_v2]
                                            [--rounds 5] [--threads 2]

* convs: one 3 x 3 stride-1 conv (padding 1) with its ReLU, C_in:C_out:size, compiled twice:
  with every conv direct (NCHWc) and with every conv as Winograd (whatever
  alter-conv-layout's thresholds say); each row says which one tcc picks by default. Both
  packs include the layout transforms to and from NCHW.
* models: the light models with random weights, compiled with Winograd off and with tcc's
  default thresholds.

Every pack is checked against onnxruntime first (largest error relative to the largest
output), then the two packs (tccrt's own timing, needs `make runtime`) and onnxruntime run
on the same input in alternating rounds, so the drift of a shared machine reaches all
three alike; each figure is the median of the rounds' medians, with their min-max.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUND_MS = 300.0  # each contender runs about this long a round


def conv_model(cin: int, cout: int, size: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def pack_runner(model, winograd: bool | None, threads: int):
    """The model compiled (no compile cache) with every eligible conv as Winograd (True),
    none (False) or as tcc's thresholds say (None), run by the C runtime."""
    import tcc.lower.passes.alter_conv_layout as acl
    from tcc.api import compile_to_bytes
    from tcc.cli.run_cmd import _make_runner

    default = acl.WINOGRAD_MIN_TILES, acl.WINOGRAD_MIN_CHANNELS
    if winograd is not None:
        acl.WINOGRAD_MIN_TILES = acl.WINOGRAD_MIN_CHANNELS = 1 if winograd else 10**9
    try:
        start = time.perf_counter()
        data = compile_to_bytes(model, "llvm", cache=False)
        seconds = time.perf_counter() - start
    finally:
        acl.WINOGRAD_MIN_TILES, acl.WINOGRAD_MIN_CHANNELS = default
    path = Path(tempfile.mkdtemp()) / "m.tvmpack"
    path.write_bytes(data)
    runner = _make_runner(path, "main", "c")
    runner.set_num_threads(threads)
    return runner, seconds


def uses_winograd(model) -> bool:
    from tcc.frontend.onnx import from_onnx
    from tcc.ir import graph as G
    from tcc.lower.passes import run_pipeline
    from tcc.target import host_target

    mod = run_pipeline(from_onnx(model), target=host_target(), disable=["fuse-ops"])
    return any(isinstance(b.value, G.Call) and b.value.op == "winograd_output_nchwc"
               for f in mod.graph_functions.values() for b in f.bindings)


def compare(name: str, model, winograd: bool | None, args) -> None:
    import onnxruntime as ort
    from models import settle, timed

    (image,) = [i for i in model.graph.input
                if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    feeds = {image.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    runners, notes = {}, []
    for label, choice in (("direct", False), ("winograd", winograd)):
        runner, seconds = pack_runner(model, choice, args.threads)
        err = float(np.abs(runner(feeds)[0] - want).max() / np.abs(want).max())
        notes.append(f"{label}: compile {seconds:.1f} s, error {err:.1e}")
        runners[label] = runner
    per_run = runners["direct"].bench(feeds, 5)[0]
    runs = max(5, int(ROUND_MS / max(per_run, 1e-3)))
    rounds = {"direct": [], "winograd": [], "ort": []}
    for _ in range(args.rounds):
        for label, runner in runners.items():
            settle()  # onnxruntime's spinning threads off the cores (models.SETTLE_S)
            rounds[label].append(runner.bench(feeds, runs)[0])
        rounds["ort"].append(statistics.median(timed(lambda: sess.run(None, feeds), runs)))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    cells = "  ".join(f"{k} {med[k]:8.3f} ({min(v):.3f}-{max(v):.3f})" for k, v in rounds.items())
    print(f"{name:22s} {cells}  winograd/direct {med['winograd'] / med['direct']:.2f}  "
          f"direct/ort {med['direct'] / med['ort']:.2f}  winograd/ort "
          f"{med['winograd'] / med['ort']:.2f}   [{'; '.join(notes)}]", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--convs", default="64:64:56,128:128:28,256:256:14,512:512:7,16:64:112")
    p.add_argument("--models", default="resnet50,vgg19,inception_v2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from tuning import cpu_name

    from tests.models import builders

    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; threads {args.threads}; "
          "ms, median of the rounds (min-max)")
    for spec in filter(None, args.convs.split(",")):
        cin, cout, size = (int(x) for x in spec.split(":"))
        model = conv_model(cin, cout, size)
        picked = "winograd" if uses_winograd(model) else "direct"
        compare(f"conv {cin}->{cout} {size}x{size} ({picked})", model, True, args)
    for name in filter(None, args.models.split(",")):
        compare(name, builders.light_model(name), None, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
