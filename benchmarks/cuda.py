"""tcc's CUDA packs on a GPU against onnxruntime (results) and PyTorch (time).

    PYTHONPATH=. python3 benchmarks/cuda.py [--models resnet50,bert,gpt2,mobilenet]
                                            [--batches 1,16] [--runs 50] [--matmul 4096]
                                            [--smoke] [--json out.json]

Each model is written here in plain torch (the GPU machine has torch but not transformers
or torchvision) with seeded random weights, exported to ONNX with a dynamic batch (the
legacy exporter), compiled by tcc for `--target cuda` once, and run from that one pack at
every batch size. Per model and batch:

* results: the pack's outputs on the GPU against onnxruntime's on the CPU, same inputs
  (rtol 1e-3, atol 1e-4);
* time: median and spread (10th to 90th percentile) of `runs` calls, after warm-up, of
  the tcc pack three ways: tcc.rt with numpy in and out (the input's and outputs' copies
  counted), tcc.rt with torch's GPU tensors in and out through DLPack (`on_device`, no
  copies: the conditions torch runs under), and the C runtime in this process (libtccrt
  through ctypes, numpy in and out; built with make, skipped where that fails); torch
  eager and `torch.compile` (default mode) on the same GPU with the inputs already there;
  and the ratios tcc / torch.compile and tcc / eager, with their geomeans, for tcc.rt on
  GPU tensors.

Per model, at the first batch size, the pack's profile (`tcc run --profile`'s rows: each
kernel's GPU time between CUDA events, per run) prints its five largest kernels and the
share of the run outside kernels.

Then a matrix product of `--matmul` cubed, fp32 and fp16, as a one-node ONNX model through
tcc against `torch.matmul` (cuBLAS), in TFLOP/s.

`--smoke` makes every model tiny (and the matrix product 64 cubed), to check the script
itself on a machine without a GPU: with $TCC_CUDA_DRIVER pointing at the test suite's
stand-in driver (tests/rt/fake_libcuda.c) the packs run on the CPU, and the torch timings
are skipped where torch sees no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RTOL, ATOL = 1e-3, 1e-4


# -- the models, in plain torch ---------------------------------------------------------------


def _models(smoke: bool) -> dict:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    class ResNet(nn.Module):
        def __init__(self, blocks, base, classes):
            super().__init__()
            layers = [nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base), nn.ReLU(),
                      nn.MaxPool2d(3, 2, 1)]
            cin = base
            for i, n in enumerate(blocks):
                for j in range(n):
                    layers.append(Bottleneck(cin, base * 2 ** i, 2 if j == 0 and i > 0 else 1))
                    cin = base * 2 ** i * 4
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(cin, classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            mid = cin * expand
            self.use_skip = stride == 1 and cin == cout
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.body(x)
            return x + y if self.use_skip else y

    class MobileNet(nn.Module):
        def __init__(self, settings, classes):
            super().__init__()
            layers, cin = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()], 32
            for expand, cout, n, stride in settings:
                for j in range(n):
                    layers.append(InvertedResidual(cin, cout, stride if j == 0 else 1, expand))
                    cin = cout
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(cin, classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    class Block(nn.Module):
        def __init__(self, hidden, heads, causal):
            super().__init__()
            self.heads, self.causal = heads, causal
            self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.ff = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

        def attention(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
            if self.causal:
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h))

        def forward(self, x):
            if self.causal:  # GPT-2: normalize first
                x = x + self.attention(self.ln1(x))
                return x + self.ff(self.ln2(x))
            x = self.ln1(x + self.attention(x))  # BERT: normalize after
            return self.ln2(x + self.ff(x))

    class Transformer(nn.Module):
        def __init__(self, vocab, hidden, heads, layers, seq, causal):
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.blocks = nn.Sequential(*(Block(hidden, heads, causal) for _ in range(layers)))
            self.norm = nn.LayerNorm(hidden)

        def forward(self, ids):
            positions = torch.arange(ids.shape[1], device=ids.device)
            return self.norm(self.blocks(self.tokens(ids) + self.positions(positions)))

    if smoke:
        image, seq = 32, 16
        nets = {
            "resnet50": lambda: ResNet([1, 1], 8, 10),
            "mobilenet": lambda: MobileNet([(1, 8, 1, 1), (6, 16, 2, 2)], 10),
            "bert": lambda: Transformer(100, 64, 4, 2, seq, False),
            "gpt2": lambda: Transformer(100, 64, 4, 2, seq, True),
        }
    else:
        image, seq = 224, 128
        mobilenet = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                     (6, 160, 3, 2), (6, 320, 1, 1)]
        nets = {
            "resnet50": lambda: ResNet([3, 4, 6, 3], 64, 1000),
            "mobilenet": lambda: MobileNet(mobilenet, 1000),
            "bert": lambda: Transformer(30522, 768, 12, 12, seq, False),
            "gpt2": lambda: Transformer(50257, 768, 12, 12, seq, True),
        }

    def make(name):
        torch.manual_seed(0)
        model = nets[name]().eval()
        if name in ("bert", "gpt2"):
            def inputs(batch, rng):
                return (torch.from_numpy(rng.integers(0, 100, (batch, seq))),)
            return model, inputs, ["ids"], {"ids": {0: "batch"}}

        def inputs(batch, rng):
            return (torch.from_numpy(rng.standard_normal((batch, 3, image, image)).astype(np.float32)),)
        return model, inputs, ["x"], {"x": {0: "batch"}}

    return {name: (lambda name=name: make(name)) for name in nets}


# -- measuring -------------------------------------------------------------------------------


def timed(fn, runs: int, sync=lambda: None) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile of `runs` calls in seconds, after warm-up."""
    for _ in range(max(3, runs // 10)):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[(9 * len(times)) // 10]


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def matches(got, want) -> tuple[bool, float]:
    worst = 0.0
    ok = True
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return False, float("inf")
        err = np.abs(g - w)
        worst = max(worst, float(err.max(initial=0.0)))
        ok = ok and bool(np.all(err <= ATOL + RTOL * np.abs(w)))
    return ok, worst


def _fmt(t) -> str:
    return "n/a" if t is None else f"{t[0] * 1e3:8.3f} ms ({t[1] * 1e3:.3f}-{t[2] * 1e3:.3f})"


def stand_in(pack: Path) -> None:
    """Under --smoke with the stand-in driver ($TCC_CUDA_DRIVER): build the pack's CUDA
    source for this CPU, as the test suite does, and point the driver at it."""
    import io
    import os
    import tarfile

    if not os.environ.get("TCC_CUDA_DRIVER"):
        return
    from tests.emit import cuda_on_host

    with tarfile.open(fileobj=io.BytesIO(pack.read_bytes())) as tf:
        source = tf.extractfile("kernels/cuda.cu").read().decode()
    folder = pack.parent / f"{pack.stem}-host"
    folder.mkdir(exist_ok=True)
    os.environ["TCC_FAKE_CUDA_KERNELS"] = str(cuda_on_host.build_packed(source, folder))


def c_runtime(folder: Path):
    """libtccrt built with make and loaded with ctypes (tests/runtime_c/capi.py), or None
    where it cannot be built here."""
    import subprocess

    from tests.runtime_c.capi import CRuntime, build_runtime

    try:
        return CRuntime(build_runtime(folder / "tccrt") / "libtccrt.so")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"the C runtime is not timed: it cannot be built here ({e})", flush=True)
        return None


def bench_model(name, make, batches, runs, folder: Path, gpu: bool, smoke: bool,
                crt=None) -> list[dict]:
    import onnxruntime as ort
    import torch

    import tcc.rt
    from tcc.api import compile_to_bytes

    model, inputs, names, dynamic = make()
    rng = np.random.default_rng(0)
    example = inputs(batches[0], rng)
    onnx_path = folder / f"{name}.onnx"
    torch.onnx.export(model, example, str(onnx_path), input_names=names, output_names=["y"],
                      dynamic_axes=dynamic, opset_version=17, dynamo=False)
    t0 = time.perf_counter()
    pack = folder / f"{name}.tvmpack"
    pack.write_bytes(compile_to_bytes(onnx_path, "cuda"))
    compile_s = time.perf_counter() - t0
    if smoke:
        stand_in(pack)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rows = []
    c_module = crt.load(pack) if crt is not None else None
    with tcc.rt.load(pack) as m:
        compiled = None
        for batch in batches:
            args = inputs(batch, np.random.default_rng(batch))
            host = [a.numpy() for a in args]
            got = m.main(*host)
            want = session.run(None, dict(zip(names, host)))
            ok, worst = matches(got, want)
            row = {"model": name, "batch": batch, "compile_s": compile_s, "matches": ok,
                   "max_abs_error": worst, "tcc": timed(lambda host=host: m.main(*host), runs)}
            if c_module is not None:
                c_ok, c_worst = matches(c_module.run("main", host), want)
                row["matches"], row["max_abs_error"] = ok and c_ok, max(worst, c_worst)
                row["tcc_c"] = timed(lambda host=host: c_module.run("main", host), runs)
            if gpu:
                on_gpu = model.cuda()
                dev = [a.cuda() for a in args]
                sync = torch.cuda.synchronize
                row["tcc_device"] = timed(
                    lambda dev=dev: [torch.from_dlpack(o) for o in m.main.on_device(*dev)], runs, sync)
                with torch.no_grad():
                    row["eager"] = timed(lambda f=on_gpu, dev=dev: f(*dev), runs, sync)
                    compiled = compiled or torch.compile(on_gpu)
                    row["compile"] = timed(lambda f=compiled, dev=dev: f(*dev), runs, sync)
                model.cpu()
            if batch == batches[0]:
                row["profile"] = _profile(m, host)
            rows.append(row)
            print(f"{name:10s} batch {batch:3d}  {'match' if row['matches'] else 'MISMATCH'} "
                  f"(max |err| {row['max_abs_error']:.2e})  tcc {_fmt(row['tcc'])}"
                  f"  on GPU tensors {_fmt(row.get('tcc_device'))}  C runtime {_fmt(row.get('tcc_c'))}"
                  f"  eager {_fmt(row.get('eager'))}  compile {_fmt(row.get('compile'))}"
                  + (f"  tcc(GPU tensors)/compile {row['tcc_device'][0] / row['compile'][0]:.2f}x"
                     if gpu else ""),
                  flush=True)
    if c_module is not None:
        c_module.close()
    return rows


def _profile(module, host, runs: int = 5) -> list[dict]:
    """The pack's profile rows (kernels timed on the GPU between CUDA events), printed: the
    five largest kernels and the share of the run outside kernels."""
    rows = module.profile("main", host, runs=runs)
    kernels = [r for r in rows if r.kind == "kernel"]
    outside = sum(r.share for r in rows if r.kind != "kernel")
    for r in kernels[:5]:
        print(f"    {r.share * 100:5.1f}%  {r.total_ms:8.3f} ms  {r.calls:4.0f}x  {r.name}", flush=True)
    print(f"    outside kernels: {outside * 100:.1f}% of the run ({len(kernels)} kernels)", flush=True)
    return [{"kind": r.kind, "name": r.name, "total_ms": r.total_ms, "share": r.share} for r in rows]


def bench_matmul(n: int, runs: int, folder: Path, gpu: bool, smoke: bool) -> list[dict]:
    import onnx
    import torch
    from onnx import TensorProto, helper

    import tcc.rt
    from tcc.api import compile_to_bytes
    from tcc.errors import TccError

    rows = []
    for dtype, proto, np_dtype in (("float32", TensorProto.FLOAT, np.float32),
                                   ("float16", TensorProto.FLOAT16, np.float16)):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
            [helper.make_tensor_value_info(v, proto, [n, n]) for v in ("a", "b")],
            [helper.make_tensor_value_info("c", proto, [n, n])])
        path = folder / f"matmul_{dtype}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((n, n)).astype(np_dtype) for _ in range(2))
        flops = 2 * n ** 3
        row = {"matmul": dtype, "n": n}
        try:
            (folder / "mm.tvmpack").write_bytes(compile_to_bytes(path, "cuda"))
            if smoke:
                stand_in(folder / "mm.tvmpack")
            with tcc.rt.load(folder / "mm.tvmpack") as m:
                row["tcc"] = timed(lambda a=a, b=b: m.main(a, b), runs)
        except TccError as e:
            row["tcc_error"] = str(e)
        if gpu:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            row["cublas"] = timed(lambda ta=ta, tb=tb: torch.matmul(ta, tb), runs,
                                  torch.cuda.synchronize)
        tflops = {k: flops / row[k][0] / 1e12 for k in ("tcc", "cublas") if k in row}
        print(f"matmul {dtype} {n}^3: tcc " + (f"{tflops['tcc']:.2f} TFLOP/s" if "tcc" in tflops
                                              else f"not compiled ({row.get('tcc_error')})")
              + (f", cuBLAS {tflops['cublas']:.2f} TFLOP/s" if "cublas" in tflops else "")
              + (f", ratio {tflops['tcc'] / tflops['cublas']:.2f}x" if len(tflops) == 2 else ""),
              flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,bert,gpt2,mobilenet")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--matmul", type=int, default=4096, help="matrix size; 0 skips it")
    p.add_argument("--smoke", action="store_true", help="tiny models, to check the script")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    import torch

    gpu = torch.cuda.is_available()
    print(f"GPU: {torch.cuda.get_device_name() if gpu else 'none seen by torch (torch timings skipped)'}; "
          f"torch {torch.__version__}", flush=True)
    makers = _models(args.smoke)
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        crt = c_runtime(Path(d))
        for name in args.models.split(","):
            rows += bench_model(name, makers[name], batches, args.runs, Path(d), gpu, args.smoke,
                                crt)
        if gpu:
            for key, what in (("tcc_device", "tcc.rt on GPU tensors"), ("tcc", "tcc.rt, numpy"),
                              ("tcc_c", "C runtime, numpy")):
                timed_rows = [r for r in rows if key in r and "compile" in r]
                if timed_rows:
                    print(f"geomean {what} / torch.compile: "
                          f"{geomean([r[key][0] / r['compile'][0] for r in timed_rows]):.2f}x, "
                          f"/ eager: {geomean([r[key][0] / r['eager'][0] for r in timed_rows]):.2f}x "
                          f"over {len(timed_rows)}")
        print(f"all match onnxruntime: {all(r['matches'] for r in rows)}")
        if args.matmul:
            rows += bench_matmul(64 if args.smoke else args.matmul, args.runs, Path(d), gpu,
                                 args.smoke)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
