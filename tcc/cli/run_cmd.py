"""`tcc run FILE.tcir|FILE.tvmpack [inputs] [outputs] [--random-inputs] [--bench N] [--profile]
[--check] [--runtime python|c]`."""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from tcc.cli.arrays_io import (
    flatten_outputs,
    load_inputs,
    safe_file_names,
    write_npz,
    write_output_dir,
)
from tcc.errors import TccError
from tcc.infile import not_a_file
from tcc.ir.errors import InputError
from tcc.ir.summary import type_text
from tcc.outfile import scratch_dir
from tcc.rt.c_runtime import CRuntimePack
from tcc.rt.tensor import numpy_dtype, random_array


class _InProcessRunner:
    """A runner called in this process; --bench times it here."""

    def bench(self, inputs: dict, runs: int) -> tuple[float, float, float]:
        """Median, min and max ms of `runs` runs (the caller's run was the warm-up)."""
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self(inputs)
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times), min(times), max(times)


class _IRRunner(_InProcessRunner):
    """A .tcir (or .onnx) file run by the reference interpreter."""

    def __init__(self, path: Path, entry: str):
        from tcc.cli.loading import load_ir
        from tcc.ir.summary import signature

        self.mod = load_ir(path)
        if entry not in self.mod.graph_functions:
            raise TccError(f"{path}: no function {entry!r}; it has {sorted(self.mod.graph_functions)}")
        self.entry = entry
        self.signature = signature(self.mod[entry])

    def __call__(self, inputs: dict) -> list:
        from tcc.ir.interp import run

        return run(self.mod, inputs, name=self.entry)

    def set_num_threads(self, n: int) -> None:
        pass  # the interpreter's threads are numpy's


class _PackRunner(_InProcessRunner):
    """A .tvmpack run by the Python loader (tcc.rt)."""

    def __init__(self, path: Path, entry: str, public_key: Path | None = None):
        from tcc.rt import load

        why = not_a_file(path)
        if why:
            raise TccError(f"{path}: {why}")
        self.module = load(path, require_signature=public_key)
        self.signature = self.module.signature(entry)
        self.fn = self.module[entry]

    def __call__(self, inputs: dict) -> list:
        return self.fn(inputs)

    def set_num_threads(self, n: int) -> None:
        self.module.set_num_threads(n)


class _CRunner(CRuntimePack):
    """A .tvmpack run by the C runtime, its outputs read back from .npy files."""

    def __call__(self, inputs: dict) -> list:
        with scratch_dir("tcc-run-") as tmp:
            out = Path(tmp) / "outputs"
            self.tccrt_run("run", str(self.path), "--function", self.entry,
                           *self.input_args(Path(tmp), inputs), "--output-dir", str(out),
                           *self.thread_args, *self.signature_args)
            files = safe_file_names([o["name"] for o in self.signature["outputs"]])
            return [np.load(out / f"{f}.npy") for f in files]


def parse_shapes(pairs: tuple[str, ...],
                 expected: str = "NAME=DIMS, e.g. input=1,3,224,224") -> dict[str, list[int]]:
    """`--shape NAME=DIMS` options as {name: dims}; a malformed one names `expected`."""
    shapes = {}
    for pair in pairs:
        name, sep, dims = pair.partition("=")
        if not sep or not name or not re.fullmatch(r"\s*\d+(\s*[,x]\s*\d+)*\s*", dims):
            raise TccError(f"--shape {pair!r}: expected {expected}")
        shapes[name] = [int(d) for d in re.split(r"[,x]", dims)]
    return shapes


def make_random_inputs(signature: dict, given: dict, shapes: dict, seed: int = 0) -> dict:
    """Seeded inputs for every input not in `given`: floats ~ N(0, 1), integers in [0, 8),
    bools uniform. A symbolic dimension takes its value from --shape, else 1."""
    rng = np.random.default_rng(seed)
    out = dict(given)
    for spec in signature["inputs"]:
        name = spec["name"]
        if name in out:
            continue
        if "shape" not in spec:
            raise InputError(f"--random-inputs: input {name!r} is {type_text(spec)}, which tcc "
                             f"does not make up; give it with --input {name}=FILE.npz")
        if name in shapes:
            shape = shapes[name]
            if len(shape) != len(spec["shape"]):
                raise TccError(f"--shape {name}: rank {len(shape)} but the input has rank {len(spec['shape'])}")
            for axis, (want, got) in enumerate(zip(spec["shape"], shape)):
                if isinstance(want, int) and want != got:
                    raise TccError(f"--shape {name}: dim {axis} is {got}, but the input's dim {axis} is "
                                   f"fixed at {want} (its shape is {_shape_text(spec['shape'])})")
        else:
            shape = [d if isinstance(d, int) else 1 for d in spec["shape"]]
        dtype = numpy_dtype(spec["dtype"])
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > _memory_bytes():
            given_by = f"--shape {name}" if name in shapes else f"input {name!r}"
            raise TccError(f"{given_by}: shape {list(shape)} needs {nbytes:,} bytes of {spec['dtype']}, more "
                           f"than this machine's {_memory_bytes():,} bytes of memory; give a smaller shape")
        out[name] = random_array(shape, spec["dtype"], rng)
    return out


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


PROFILE_TOP = 25  # rows shown by --profile; the rest share one line


def kernel_label(name: str, origins) -> str:
    """`conv2d_kernel (resnetv17_conv0_fwd, +52 more)`: a kernel and the first node it runs."""
    if not origins:
        return name
    more = f", +{len(origins) - 1} more" if len(origins) > 1 else ""
    return f"{name} ({origins[0]}{more})"


def profile_table(rows, runs: int, top: int = PROFILE_TOP) -> Table:
    """The --profile table: rows (tcc.rt.ProfileRow, sorted by share) per run."""
    total = sum(r.total_ms for r in rows)
    t = Table(title=f"profile: {total:.3f} ms per run, mean of {runs} run{'s' * (runs != 1)}",
              title_justify="left")
    t.add_column("share", justify="right")
    t.add_column("kind")
    t.add_column("name (nodes)", overflow="fold")
    t.add_column("calls", justify="right")
    t.add_column("total ms", justify="right")
    t.add_column("mean ms", justify="right")
    for r in rows[:top]:
        label = kernel_label(r.name, r.origins) if r.kind == "kernel" else r.name
        t.add_row(f"{100 * r.share:.1f}%", r.kind, label, f"{r.calls:g}", f"{r.total_ms:.3f}",
                  f"{r.mean_ms:.4f}")
    rest = rows[top:]
    if rest:
        calls = sum(r.calls for r in rest)
        t.add_row(f"{100 * sum(r.share for r in rest):.1f}%", "", f"{len(rest)} more rows",
                  f"{calls:g}", f"{sum(r.total_ms for r in rest):.3f}", "")
    return t


def _check_against_onnx(console: Console, onnx_path: Path, inputs: dict, named: dict,
                        rtol: float, atol: float) -> bool:
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    except Exception as e:
        raise TccError(f"--onnx {onnx_path}: onnxruntime cannot load it: {str(e).splitlines()[0]}") from None
    try:
        want = sess.run(None, inputs)
    except Exception as e:
        raise TccError(f"--onnx {onnx_path}: onnxruntime cannot run it on these inputs "
                       f"({str(e).splitlines()[0][:160]}); is it the model the file was built from?") from None
    if len(want) != len(named):
        raise TccError(f"--onnx {onnx_path} has {len(want)} outputs but the run produced {len(named)}; "
                       "is it the model the file was built from?")
    ok = True
    for (name, got), ref in zip(named.items(), want):
        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape:
            console.print(f"{name}: shape {got.shape}, onnxruntime {ref.shape}  [red]FAIL[/]")
            ok = False
            continue
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64)) if got.size else np.zeros(1)
        rel = err / np.maximum(np.abs(ref.astype(np.float64)), 1e-12) if got.size else err
        good = np.allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
        ok &= bool(good)
        verdict = "[green]ok[/]" if good else "[red]FAIL[/]"
        console.print(f"{name}: max abs {err.max():.3g}, max rel {rel.max():.3g}  {verdict}")
    return ok


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_pairs", multiple=True, metavar="NAME=PATH.npy",
              help="An input array, by the model's input name (repeatable); an .npz "
                   "archive here gives a sequence input (its arrays in order).")
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False, path_type=Path),
              help="An .npz archive of inputs keyed by input name.")
@click.option("--random-inputs", is_flag=True,
              help="Make seeded random values for every input not given.")
@click.option("--shape", "shape_pairs", multiple=True, metavar="NAME=DIMS",
              help="Shape of a random input, e.g. input_ids=1,128 (symbolic dims default to 1).")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one NAME.npy per output here (the folder is created if missing); "
                   "a sequence output as NAME.0.npy, NAME.1.npy, ...")
@click.option("--output", "output_npz", type=click.Path(dir_okay=False, path_type=Path),
              help="Write all outputs into one .npz keyed by output name.")
@click.option("--entry", default="main", show_default=True, help="The function to run.")
@click.option("--bench", type=click.IntRange(min=1), metavar="N",
              help="Time N runs after a warm-up and print the median and spread.")
@click.option("--threads", type=click.IntRange(min=1), metavar="N",
              help="Threads for the kernels (packs; default: TCC_NUM_THREADS when set, else the "
                   "machine's cores; at most 8 per core and 1024).")
@click.option("--profile", is_flag=True,
              help="Time each kernel (packs only) over the --bench runs (or one) and print a "
                   "table sorted by share, kernels named after the ONNX nodes they run (with "
                   "--runtime c: tccrt's table, kernels by symbol, and the share outside them).")
@click.option("--runtime", type=click.Choice(["python", "c"]), default="python", show_default=True,
              help="Which runtime runs a .tvmpack: tcc.rt in this process, or the C runtime's "
                   "tccrt ($TCCRT, else runtime_c/build/tccrt, else tccrt on the PATH). A "
                   "CUDA pack runs on this machine's GPU in either.")
@click.option("--require-signature", "public_key", type=click.Path(dir_okay=False, path_type=Path),
              metavar="PUBKEY",
              help="Run the pack only if it is signed by this Ed25519 public key (PEM; from "
                   "`tcc compile --sign KEY`), checked before anything in it is read or loaded.")
@click.option("--check", is_flag=True, help="Compare with onnxruntime (needs --onnx); exit 1 when outside tolerance.")
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The source ONNX model, for --check.")
@click.option("--rtol", default=1e-3, show_default=True, help="Relative tolerance for --check.")
@click.option("--atol", default=1e-4, show_default=True, help="Absolute tolerance for --check.")
def command(file, input_pairs, inputs_npz, **opts):
    """Run an IR file with the reference interpreter, or a .tvmpack with the Python loader
    (or, with --runtime c, the C runtime's `tccrt run`; both give the same bits).

    A .tvmpack is executable code: its kernels run as native code in this process. Run
    only packs from a source you trust, or give --require-signature (docs/security.md).

    Output file names replace characters other than letters, digits, '-', '_' and '.'
    with '_'; the .npz keeps the exact output names.
    """
    _run(file, input_pairs, inputs_npz, **opts)


def _run(file, input_pairs, inputs_npz, random_inputs, shape_pairs, output_dir, output_npz,
         entry, bench, threads, profile, runtime, public_key, check, onnx_path, rtol, atol):
    if check and onnx_path is None:
        raise TccError("--check needs the source model: add --onnx MODEL.onnx")
    if onnx_path is not None and not check:
        raise TccError("--onnx is only used by --check; add --check")
    if rtol < 0 or atol < 0:
        raise TccError("--rtol and --atol must not be negative")
    if shape_pairs and not random_inputs:
        raise TccError("--shape sets the shape of random inputs; add --random-inputs")
    if profile and file.suffix != ".tvmpack":
        raise TccError(f"{file}: --profile times compiled kernels and needs a .tvmpack; "
                       f"compile it first: tcc compile {file} -o {file.stem}.tvmpack")
    if runtime == "c" and file.suffix != ".tvmpack":
        raise TccError(f"{file}: --runtime c runs compiled packs only; compile it first: "
                       f"tcc compile {file} -o {file.stem}.tvmpack")
    if public_key is not None and file.suffix != ".tvmpack":
        raise TccError(f"{file}: --require-signature checks signed packs; this is not a .tvmpack")
    inputs = load_inputs(input_pairs, inputs_npz)
    runner = _make_runner(file, entry, runtime, public_key)
    if threads:
        runner.set_num_threads(threads)
    if random_inputs:
        shapes = parse_shapes(shape_pairs)
        names = [spec["name"] for spec in runner.signature["inputs"]]
        unknown = [n for n in shapes if n not in names]
        if unknown:
            raise TccError(f"--shape {unknown[0]}: no such input; the inputs are {', '.join(names)}")
        given = [n for n in shapes if n in inputs]
        if given:
            raise TccError(f"--shape {given[0]}: that input is given with --input/--inputs")
        inputs = make_random_inputs(runner.signature, inputs, shapes)
    _check_sequence_inputs(runner.signature, inputs)
    outputs = runner(inputs)
    names = [o["name"] for o in runner.signature["outputs"]]
    named = dict(zip(names, outputs))
    console = Console(highlight=False, soft_wrap=True)
    if output_dir is not None:
        paths = write_output_dir(output_dir, flatten_outputs(named))
        console.print(f"wrote {len(paths)} output file(s) to {output_dir}")
    if output_npz is not None:
        flat = flatten_outputs(named)
        write_npz(output_npz, flat)
        console.print(f"wrote {len(flat)} array(s) to {output_npz}")
    if output_dir is None and output_npz is None:
        for name, value in named.items():
            if value is None:
                console.print(f"{name}: empty optional")
            elif isinstance(value, list):
                console.print(f"{name}: sequence of {len(value)} tensor{'' if len(value) == 1 else 's'}")
                for i, arr in enumerate(value):
                    console.print(f"  [{i}] {_preview(arr)}")
            else:
                console.print(f"{name}: {_preview(value)}")
    if bench:
        median, lo, hi = runner.bench(inputs, bench)
        console.print(f"bench: {bench} runs, median {median:.3f} ms (min {lo:.3f}, max {hi:.3f})")
    if profile and runtime == "c":
        console.print(runner.profile_text(inputs, bench or 1), markup=False)
    elif profile:
        runs = bench or 1
        rows = runner.module.profile(entry, inputs, runs=runs, warmup=0)  # warmed up above
        console.print(profile_table(rows, runs))
    if check and not _check_against_onnx(console, onnx_path, inputs, named, rtol, atol):
        raise SystemExit(1)


def _preview(arr) -> str:
    arr = np.asarray(arr)
    return f"{arr.dtype}{list(arr.shape)} {np.array2string(arr.ravel()[:8], precision=5, separator=', ')}"


def _check_sequence_inputs(signature: dict, inputs: dict) -> None:
    """An .npz given with --input is a sequence; only a sequence input takes one."""
    for spec in signature["inputs"]:
        value = inputs.get(spec["name"])
        if isinstance(value, list) and "sequence" not in spec and "sequence" not in spec.get("optional", {}):
            raise InputError(f"input {spec['name']!r}: an .npz given with --input is a sequence, but "
                             f"this input is {type_text(spec)}; pass an .npy file (or every input in "
                             "one archive with --inputs)")


def _make_runner(file: Path, entry: str, runtime: str, public_key: Path | None = None):
    if file.suffix != ".tvmpack":
        return _IRRunner(file, entry)
    return (_CRunner if runtime == "c" else _PackRunner)(file, entry, public_key)
