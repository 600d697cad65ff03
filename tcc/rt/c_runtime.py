"""The C runtime driven from Python: `tccrt` found, and a pack run or timed by it in a
subprocess (`tcc run --runtime c`, and the tuner's in-model check, which must time a model
as deployed, with no Python between its kernels)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from tcc.errors import InternalError, TccError
from tcc.outfile import scratch_dir

# The dtypes .npy files carry to the C runtime (runtime_c/tools/npy.c).
C_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64"}
BENCH_LINE = re.compile(r"bench: \d+ runs, median ([\d.]+) ms \(min ([\d.]+), max ([\d.]+)\)")


def find_tccrt() -> str:
    """The C runtime's command: $TCCRT, else runtime_c/build/tccrt of this source tree (an
    editable install), else `tccrt` on the PATH."""
    env = os.environ.get("TCCRT")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise TccError(f"TCCRT={env} is not an executable file; build it with `make runtime` "
                           "or unset TCCRT")
        return env
    built = Path(__file__).resolve().parents[2] / "runtime_c" / "build" / "tccrt"
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    found = shutil.which("tccrt")
    if found:
        return found
    raise TccError("the C runtime is not built; run `make runtime` (or set TCCRT=/path/to/tccrt)")


class CRuntimePack:
    """A .tvmpack run by the C runtime: `tccrt run` in a subprocess, with the inputs as
    .npy files in a private temporary directory."""

    def __init__(self, path: Path, entry: str, public_key: Path | None = None):
        self.tccrt = find_tccrt()
        self.path, self.entry = path, entry
        self.thread_args: list[str] = []
        self.signature_args = ["--require-signature", str(public_key)] if public_key else []
        info = self.tccrt_run("info", "--json", *self.signature_args, str(path))
        functions = json.loads(info)["functions"]
        if entry not in functions:
            raise TccError(f"no entry function {entry!r}; the pack has {sorted(functions)}")
        self.signature = functions[entry]

    def tccrt_run(self, *args: str) -> str:
        r = subprocess.run([self.tccrt, *args], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout
        lines = r.stderr.strip().splitlines()
        if r.returncode == 2 and lines and lines[-1].startswith("error: "):
            raise TccError(lines[-1].removeprefix("error: "))
        code = r.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        raise InternalError(f"{self.tccrt} {how}: {lines[-1] if lines else 'no message'}")

    def input_args(self, directory: Path, inputs: dict) -> list[str]:
        """Write each input as a C-order little-endian .npy; `--input NAME=PATH` for each."""
        want = [s["name"] for s in self.signature["inputs"]]
        args = []
        for i, (name, arr) in enumerate(inputs.items()):
            arr = np.asarray(arr)
            if arr.dtype.name not in C_DTYPES:  # the Python runtime's messages, as tccrt's
                if name not in want:
                    raise TccError(
                        f"{self.entry!r} has no input named {name!r}; its inputs are {want}")
                dtype = self.signature["inputs"][want.index(name)]["dtype"]
                raise TccError(f"input {name!r} of {self.entry!r}: expected dtype {dtype}, "
                               f"got {arr.dtype.name}")
            path = directory / f"input{i}.npy"
            # C order, little-endian, and a 0-d array stays 0-d (np.ascontiguousarray makes it 1-d)
            np.save(path, arr.astype(arr.dtype.newbyteorder("<"), order="C", copy=False))
            args += ["--input", f"{name}={path}"]
        return args

    def bench(self, inputs: dict, runs: int) -> tuple[float, float, float]:
        """Median, min and max ms as tccrt measures them (after its own warm-up run)."""
        with scratch_dir("tcc-run-") as tmp:
            stdout = self.tccrt_run("run", str(self.path), "--function", self.entry,
                                    *self.input_args(Path(tmp), inputs), "--bench", str(runs),
                                    *self.thread_args, *self.signature_args)
        m = BENCH_LINE.search(stdout)
        if m is None:
            raise InternalError(f"{self.tccrt} printed no bench line: {stdout[-200:]!r}")
        median, lo, hi = (float(g) for g in m.groups())
        return median, lo, hi

    def profile_text(self, inputs: dict, runs: int) -> str:
        """tccrt's --profile table over `runs` runs (after its own warm-up run)."""
        with scratch_dir("tcc-run-") as tmp:
            stdout = self.tccrt_run("run", str(self.path), "--function", self.entry,
                                    *self.input_args(Path(tmp), inputs), "--bench", str(runs),
                                    "--profile", *self.thread_args, *self.signature_args)
        start = stdout.find("profile: ")
        if start < 0:
            raise InternalError(f"{self.tccrt} printed no profile: {stdout[-200:]!r}")
        return stdout[start:].rstrip("\n")

    def set_num_threads(self, n: int) -> None:
        self.thread_args = ["--threads", str(n)]
