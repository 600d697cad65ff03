"""Reading run inputs from .npy/.npz files and writing outputs whole or not at all."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import numpy as np

from tcc.infile import not_a_file
from tcc.ir.errors import InputError, TccError
from tcc.outfile import Staged, open_output


def _load_npy(path: Path, what: str) -> np.ndarray:
    if path.is_dir():
        raise InputError(f"{what}: {path} is a directory, not an .npy file")
    why = not_a_file(path)
    if why:
        raise InputError(f"{what}: {path}: {why}")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception:
        raise InputError(
            f"{what}: {path} is not a readable .npy file of numbers; save arrays with numpy.save"
        ) from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        return _load_sequence(path, arr, what)
    _check_data_size(path, arr, what)
    return arr


def _load_sequence(path: Path, z, what: str) -> list[np.ndarray]:
    """An .npz given for one input is a sequence: its arrays in the archive's order."""
    try:
        with z:
            return [z[k] for k in z.files]
    except Exception:
        raise InputError(f"{what}: {path} has an unreadable member; write it with numpy.savez") from None


def _check_data_size(path: Path, arr: np.ndarray, what: str) -> None:
    """The data must fill the file exactly, as tccrt's reader requires (runtime_c/tools/npy.c):
    numpy.load ignores bytes after the array."""
    with open(path, "rb") as f:
        fmt = np.lib.format  # np.load has read this header already: its version is one numpy knows
        (fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0)(f)
        available = os.fstat(f.fileno()).st_size - f.tell()
    if available != arr.nbytes:
        raise InputError(f"{what}: {path}: the data is {available} bytes but {arr.dtype.name}{arr.shape} needs "
                         f"{arr.nbytes} ({'truncated' if available < arr.nbytes else 'trailing bytes'}); "
                         "save it with numpy.save")


def load_inputs(pairs: tuple[str, ...], npz: Path | None) -> dict[str, np.ndarray | list]:
    """Merge `--inputs FILE.npz` and `--input NAME=PATH.npy` (the latter wins). `--input
    NAME=PATH.npz` gives a sequence input: the archive's arrays in order."""
    inputs: dict[str, np.ndarray] = {}
    if npz is not None:
        why = not_a_file(npz)
        if why:
            raise InputError(f"--inputs: {npz}: {why}")
        try:
            z = np.load(npz, allow_pickle=False)
        except Exception:
            raise InputError(f"--inputs: {npz} is not a readable .npz archive; write one with numpy.savez") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise InputError(f"--inputs: {npz} is a single .npy array, not an .npz archive; pass it with --input NAME={npz}")
        try:
            with z:
                for k in z.files:
                    inputs[k] = z[k]
        except Exception:
            raise InputError(f"--inputs: {npz} has an unreadable member; write it with numpy.savez") from None
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--input {pair!r}: expected NAME=PATH.npy")
        inputs[name] = _load_npy(Path(path), f"input {name!r}")
    return inputs


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_file_names(names: list[str]) -> list[str]:
    """File names for outputs: unsafe characters become `_`; clashes get a numeric suffix."""
    out, used = [], set()
    for n in names:
        base = _UNSAFE.sub("_", n)
        if base in ("", ".", ".."):
            base = f"_{base}"
        cand, k = base, 1
        while cand in used:
            cand, k = f"{base}_{k}", k + 1
        used.add(cand)
        out.append(cand)
    return out


def flatten_outputs(outputs: dict) -> dict[str, np.ndarray]:
    """Outputs as arrays to write: a sequence's tensors as `NAME.0`, `NAME.1`, ...; an empty
    optional writes nothing."""
    flat: dict[str, np.ndarray] = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            flat.update({f"{name}.{i}": np.asarray(v) for i, v in enumerate(value)})
        elif value is not None:
            flat[name] = np.asarray(value)
    return flat


def write_output_dir(directory: Path, outputs: dict[str, np.ndarray]) -> list[Path]:
    """Write one .npy per output into `directory` (created if missing, its parent must
    exist); all files appear, or none do."""
    what = f"--output-dir {directory}: cannot write outputs"
    names = safe_file_names(list(outputs))
    staged: list[Staged] = []
    try:
        try:
            directory.mkdir(exist_ok=True)
        except OSError as e:
            raise TccError(f"{what}: {e.strerror or e}") from None
        for fname, arr in zip(names, outputs.values()):
            staged.append(Staged(directory / f"{fname}.npy", what))
            try:
                np.save(staged[-1].file, arr, allow_pickle=False)
            except OSError as e:
                raise TccError(f"{what}: {e.strerror or e}") from None
        for i, s in enumerate(staged):
            s.commit()
            staged[i] = None
    finally:
        for s in staged:
            if s is not None:
                s.discard()
    return [directory / f"{fname}.npy" for fname in names]


def write_npz(path: Path, outputs: dict[str, np.ndarray]) -> None:
    """Write all outputs into one .npz keyed by their exact names, atomically."""
    with open_output(path, f"--output {path}: cannot write outputs") as f, zipfile.ZipFile(f, "w") as z:
        for name, arr in outputs.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)
