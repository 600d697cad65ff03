"""The default schedule rules against references, in one run, on the same thread count:

    .venv/bin/python benchmarks/schedules.py [--threads 2] [--runs 10] [--models resnet50,bert]

* fp32 matmul 1024x1024x1024: tcc's kernel (scheduled by the rules, and as legalized) vs
  numpy/OpenBLAS, in GFLOP/s; OPENBLAS_NUM_THREADS is set to --threads and
  OPENBLAS_CORETYPE unset before numpy loads, so both use the same cores.
* a MobileNet-style model (depthwise 3x3 + pointwise 1x1 blocks) and a softmax/layer-norm
  heavy model vs onnxruntime, latency ratio: tcc's pack in the C runtime (the deployment
  runtime, built as benchmarks/models.py does) and, for reference, in the Python loader;
* the models of benchmarks/models.py named by --models (ResNet-50 and BERT by default),
  with their compile time.

Every timing is the median of --runs with its min-max spread; outputs are checked against
the reference first, so a fast wrong answer never counts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--models", default="resnet50,bert",
                   help="models of benchmarks/models.py to time ('' for none)")
    return p.parse_args(argv)


def _stats(ms: list[float]) -> str:
    return f"{statistics.median(ms):8.2f} ms ({min(ms):.1f}-{max(ms):.1f})"


def matmul_row(n: int, threads: int, runs: int) -> None:
    import numpy as np
    from models import timed

    from tcc.emit.llvm import compile_prim_funcs
    from tcc.ir.graph import TensorType
    from tcc.lower.legalize import op_prim_func
    from tcc.lower.rules import schedule_prim_func
    from tcc.rt.kernels import load_cpu_library
    from tcc.target import parse_target

    t = TensorType((n, n), "float32")
    plain = op_prim_func("matmul", [t, t], {})
    funcs = {"ruled": schedule_prim_func(plain, parse_target("llvm")), "plain": plain}
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    want = a @ b
    gflops = 2 * n**3 / 1e6  # per ms
    ref = timed(lambda: a @ b, runs)
    print(f"matmul {n}^3     numpy   {_stats(ref)} {gflops / statistics.median(ref):7.1f} GFLOP/s")
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        lib.set_num_threads(threads)
        for name in funcs:
            c = np.zeros((n, n), np.float32)
            lib.call(name, [a, b, c])
            if not np.allclose(c, want, rtol=1e-3, atol=1e-3):
                print(f"matmul {n}^3     tcc {name}: WRONG RESULT")
                continue
            if name == "plain" and n > 256:
                print(f"matmul {n}^3     tcc {name}: skipped (minutes at this size)")
                continue
            ms = timed(lambda k=name, c=c: lib.call(k, [a, b, c]), runs)
            rate = gflops / statistics.median(ms)
            ratio = statistics.median(ref) / statistics.median(ms)
            print(f"matmul {n}^3     tcc {name:5s} {_stats(ms)} {rate:7.1f} GFLOP/s  "
                  f"{ratio:5.2f}x numpy")


def mobilenet_style(blocks: int = 4, channels: int = 64, size: int = 56):
    """Depthwise 3x3 (+ReLU) then pointwise 1x1 (+ReLU), `blocks` times."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(blocks):
        dw, pw = f"dw{k}", f"pw{k}"
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((channels, 1, 3, 3)) / 3).astype(np.float32), dw))
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((channels, channels, 1, 1)) / channels**0.5)
            .astype(np.float32), pw))
        nodes += [
            helper.make_node("Conv", [x, dw], [f"d{k}"], group=channels, pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"d{k}"], [f"dr{k}"]),
            helper.make_node("Conv", [f"dr{k}", pw], [f"p{k}"]),
            helper.make_node("Relu", [f"p{k}"], [f"y{k}"]),
        ]
        x = f"y{k}"
    shape = [1, channels, size, size]
    g = helper.make_graph(nodes, "mobilenet_style",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def norm_heavy(layers: int = 4, rows: int = 512, hidden: int = 256):
    """LayerNorm, Softmax over the last axis and a residual Add, `layers` times."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), n)
                  for n in (f"g{k}", f"b{k}")]
        nodes += [
            helper.make_node("LayerNormalization", [x, f"g{k}", f"b{k}"], [f"n{k}"], axis=-1),
            helper.make_node("Softmax", [f"n{k}"], [f"s{k}"], axis=-1),
            helper.make_node("Add", [f"s{k}", x], [f"y{k}"]),
        ]
        x = f"y{k}"
    shape = [1, rows, hidden]
    g = helper.make_graph(nodes, "norm_heavy",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def model_row(name: str, model, dims: dict, threads: int, runs: int, rt) -> None:
    """One model: tcc in the C runtime (the ratio; when `rt` is None, the Python loader's)
    and in the Python loader, onnxruntime, all on the same inputs."""
    import numpy as np
    import onnxruntime as ort
    from models import c_module, feeds_for, timed

    from tcc.api import compile_onnx

    feeds = feeds_for(model, dims, np.random.default_rng(0))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    fn = compile_onnx(model)
    compile_s = time.perf_counter() - t0
    fn.module.set_num_threads(threads)
    want, got = sess.run(None, feeds)[0], fn(feeds)[0]
    if not np.allclose(got, want, rtol=1e-3, atol=1e-4):
        print(f"{name:16s} WRONG RESULT (max abs err {np.abs(got - want).max():.3g})")
        return
    python = timed(lambda: fn(feeds), runs)
    mine, which = python, "py"
    if rt is not None:
        cm = c_module(rt, model, threads)
        arrays = [feeds[vi.name] for vi in model.graph.input if vi.name in feeds]
        if not np.allclose(cm.run("main", arrays)[0], want, rtol=1e-3, atol=1e-4):
            print(f"{name:16s} WRONG RESULT from the C runtime")
            return
        mine, which = timed(lambda: cm.run("main", arrays), runs), "C "
    ref = timed(lambda: sess.run(None, feeds), runs)
    ratio = statistics.median(mine) / statistics.median(ref)
    print(f"{name:16s} tcc {which} {_stats(mine)}  ort {_stats(ref)}  tcc/ort {ratio:6.2f}  "
          f"(tcc py {_stats(python)})  compile {compile_s:5.1f} s", flush=True)


def main(argv=None) -> int:
    args = _args(argv)
    os.environ.pop("OPENBLAS_CORETYPE", None)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # before numpy loads OpenBLAS
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    import models

    print(f"threads: {args.threads}, runs: {args.runs}")
    rt = models.c_runtime()
    matmul_row(1024, args.threads, args.runs)
    model_row("mobilenet_style", mobilenet_style(), {}, args.threads, args.runs, rt)
    model_row("norm_heavy", norm_heavy(), {}, args.threads, args.runs, rt)
    wanted = set(filter(None, args.models.split(",")))
    for name, model, dims in models.models():
        if name in wanted:
            model_row(name, model, dims, args.threads, args.runs, rt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
