"""Reading run inputs from .npy/.npz files and writing outputs whole or not at all."""

from __future__ import annotations

import os
import re
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from tcc.ir.errors import InputError, TccError


def _load_npy(path: Path, what: str) -> np.ndarray:
    if path.is_dir():
        raise InputError(f"{what}: {path} is a directory, not an .npy file")
    if not path.is_file():
        raise InputError(f"{what}: {path}: no such file")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception:
        raise InputError(
            f"{what}: {path} is not a readable .npy file of numbers; save arrays with numpy.save"
        ) from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        arr.close()
        raise InputError(f"{what}: {path} is an .npz archive; pass it with --inputs instead")
    return arr


def load_inputs(pairs: tuple[str, ...], npz: Path | None) -> dict[str, np.ndarray]:
    """Merge `--inputs FILE.npz` and `--input NAME=PATH.npy` (the latter wins)."""
    inputs: dict[str, np.ndarray] = {}
    if npz is not None:
        if not npz.is_file():
            raise InputError(f"--inputs: {npz}: no such file")
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


def _publish(tmp: str, final: Path) -> None:
    """Give a finished temp file the usual permissions and move it into place."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, final)


def write_output_dir(directory: Path, outputs: dict[str, np.ndarray]) -> list[Path]:
    """Write one .npy per output into `directory` (created if missing, its parent must
    exist); all files appear, or none do."""
    names = safe_file_names(list(outputs))
    staged: list[tuple[str, Path]] = []
    try:
        directory.mkdir(exist_ok=True)
        for fname, arr in zip(names, outputs.values()):
            fd, tmp = tempfile.mkstemp(prefix=".tcc-", suffix=".npy.tmp", dir=directory)
            with os.fdopen(fd, "wb") as f:
                np.save(f, arr, allow_pickle=False)
            staged.append((tmp, directory / f"{fname}.npy"))
        for tmp, final in staged:
            _publish(tmp, final)
    except OSError as e:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise TccError(f"--output-dir {directory}: cannot write outputs: {e.strerror or e}") from None
    return [final for _, final in staged]


def write_npz(path: Path, outputs: dict[str, np.ndarray]) -> None:
    """Write all outputs into one .npz keyed by their exact names, atomically."""
    directory = path.parent if str(path.parent) else Path(".")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tcc-", suffix=".npz.tmp", dir=directory)
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as z:
            for name, arr in outputs.items():
                with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)
        _publish(tmp, path)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise TccError(f"--output {path}: cannot write outputs: {e.strerror or e}") from None
