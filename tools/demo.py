"""End-to-end demo of the tcc command line, run by `make demo`.

Uses the CLI exactly as a user would (subprocesses of the installed `tcc` script) on
SqueezeNet from the ONNX test data, and checks tcc's result against onnxruntime.

The "light" ONNX test models ship without real weights: every conv weight is a
ConstantOfShape filled with one value (0.02), which makes any comparison meaningless.
So the demo first writes a copy of the model whose constant weights are replaced by
seeded random initializers (numpy default_rng(0), normal * 0.1).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

MODEL = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"
TCC = Path(sys.executable).parent / "tcc"
ATOL = 1e-4
RTOL = 1e-3


def step(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def tcc(*args: str) -> None:
    cmd = [str(TCC), *args]
    print("    $ " + " ".join(["tcc", *args]), flush=True)
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        print(f"demo: `tcc {args[0]}` failed with exit code {proc.returncode}", file=sys.stderr)
        sys.exit(proc.returncode)


def _is_constant(arr: np.ndarray) -> bool:
    return arr.size > 1 and bool(np.all(arr == arr.flat[0]))


def materialize_weights(model: onnx.ModelProto, seed: int = 0) -> tuple[onnx.ModelProto, int]:
    """Return a copy of `model` whose constant float weights are seeded random values.

    Replaces (a) every ConstantOfShape node whose shape is an initializer and whose
    fill value is a float by a random initializer of that shape, and (b) every float
    initializer holding one repeated value by random values. Unused initializers (the
    old shape tensors) are dropped and graph inputs are reduced to the real inputs.
    Returns the new model and the number of tensors replaced.
    """
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    new_inits: dict[str, onnx.TensorProto] = {}
    replaced = 0

    def random_tensor(name: str, shape: tuple[int, ...], dtype: np.dtype) -> onnx.TensorProto:
        values = (rng.standard_normal(shape) * 0.1).astype(dtype)
        return numpy_helper.from_array(values, name=name)

    kept_nodes = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            value = next((a for a in node.attribute if a.name == "value"), None)
            fill = numpy_helper.to_array(value.t) if value is not None else np.zeros(1, np.float32)
            if np.issubdtype(fill.dtype, np.floating):
                shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
                new_inits[node.output[0]] = random_tensor(node.output[0], shape, fill.dtype)
                replaced += 1
                continue
        kept_nodes.append(node)

    for t in g.initializer:
        arr = numpy_helper.to_array(t)
        if np.issubdtype(arr.dtype, np.floating) and _is_constant(arr):
            new_inits[t.name] = random_tensor(t.name, arr.shape, arr.dtype)
            replaced += 1
        else:
            new_inits.setdefault(t.name, t)

    used = {name for node in kept_nodes for name in node.input}
    used |= {o.name for o in g.output}
    del g.node[:]
    g.node.extend(kept_nodes)
    del g.initializer[:]
    g.initializer.extend(t for name, t in new_inits.items() if name in used)
    real_inputs = [i for i in g.input if i.name not in new_inits and i.name not in inits]
    del g.input[:]
    g.input.extend(real_inputs)
    # IR version 3 requires every initializer to be listed as a graph input; 4 does not.
    m.ir_version = max(m.ir_version, 4)
    onnx.checker.check_model(m)
    return m, replaced


def graph_input(model: onnx.ModelProto) -> tuple[str, tuple[int, ...], np.dtype]:
    init_names = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        return inp.name, shape, helper.tensor_dtype_to_np_dtype(tt.elem_type)
    raise SystemExit("demo: the model has no graph input")


def load_outputs(out_dir: Path, names: list[str]) -> dict[str, np.ndarray]:
    """Match the .npy files tcc wrote to the model's output names."""
    files = sorted(out_dir.glob("*.npy"))
    by_stem = {f.stem: f for f in files}
    result: dict[str, np.ndarray] = {}
    for name in names:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        path = by_stem.get(name) or by_stem.get(safe)
        if path is None and len(names) == 1 and len(files) == 1:
            path = files[0]
        if path is None:
            found = ", ".join(f.name for f in files) or "none"
            raise SystemExit(f"demo: no output file for {name!r} in {out_dir} (found: {found})")
        result[name] = np.load(path)
    return result


def run(work: Path) -> int:
    step(f"model: {MODEL.name}")
    original = onnx.load(str(MODEL))
    model, replaced = materialize_weights(original)
    model_path = MODEL
    if replaced:
        model_path = work / "squeezenet.onnx"
        onnx.save(model, str(model_path))
        print(f"    replaced {replaced} constant weight tensors by seeded random values")
        print(f"    -> {model_path}")

    name, shape, dtype = graph_input(model)
    step(f"(a) writing a seeded random input {name}{list(shape)} ({np.dtype(dtype).name})")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x_path = work / "x.npy"
    np.save(x_path, x)

    tcir = work / "squeezenet.tcir"
    out_dir = work / "out"
    step("(b) importing the ONNX model")
    tcc("import", str(model_path), "-o", str(tcir))
    step("(c) showing the IR statistics")
    tcc("show", str(tcir), "--stats")
    step("(d) running the reference interpreter")
    tcc("run", str(tcir), "--input", f"{name}={x_path}", "--output-dir", str(out_dir))

    step("(e) comparing with onnxruntime")
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    expected = dict(zip(out_names, sess.run(None, {name: x})))
    got = load_outputs(out_dir, out_names)

    ok = True
    for out_name in out_names:
        ref, res = expected[out_name], got[out_name]
        if ref.shape != res.shape:
            print(f"    {out_name}: shape mismatch, tcc {res.shape} vs onnxruntime {ref.shape}")
            ok = False
            continue
        err = float(np.max(np.abs(res.astype(np.float64) - ref))) if ref.size else 0.0
        close = np.allclose(res, ref, atol=ATOL, rtol=RTOL)
        ok &= bool(close)
        print(f"    {out_name}: max abs error {err:.3g} ({'ok' if close else 'TOO LARGE'})")
        if res.ndim >= 1 and res.size >= 5:
            flat = res.reshape(res.shape[0], -1)[0] if res.ndim > 1 else res
            ref_flat = ref.reshape(ref.shape[0], -1)[0] if ref.ndim > 1 else ref
            top5 = np.argsort(-flat, kind="stable")[:5].tolist()
            ref_top5 = np.argsort(-ref_flat, kind="stable")[:5].tolist()
            print(f"    top-5 classes (tcc):         {top5}")
            print(f"    top-5 classes (onnxruntime): {ref_top5}")

    if not ok:
        print(f"demo: FAILED (tolerance atol={ATOL}, rtol={RTOL})", file=sys.stderr)
        return 1

    pack = work / "squeezenet.tvmpack"
    step("(f) compiling the model for this CPU into one .tvmpack")
    tcc("compile", str(model_path), "-o", str(pack), "--verbose")
    step("(g) running the pack with the Python loader, checked against onnxruntime")
    tcc("run", str(pack), "--input", f"{name}={x_path}", "--output-dir", str(work / "out_pack"),
        "--bench", "3", "--check", "--onnx", str(model_path), "--rtol", str(RTOL), "--atol", str(ATOL))
    print("demo: OK")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the files to this directory and keep them")
    args = parser.parse_args()
    if not TCC.exists():
        print(f"demo: {TCC} not found; run `make install` first", file=sys.stderr)
        return 2
    if not MODEL.exists():
        print(f"demo: {MODEL} not found in the installed onnx package", file=sys.stderr)
        return 2
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(args.keep)
    with tempfile.TemporaryDirectory(prefix="tcc-demo-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
