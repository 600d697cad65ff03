"""Compiled packs shared by the whole test run: `compiled_pack(model, **options)` compiles a
model once per run, whichever worker asks first, and every later test that compiles the same
model the same way gets that pack. Several modules check the same models compiled with the
defaults (ResNet-50, SqueezeNet, ShuffleNet, the BERT and GPT-2 builders): one compile each
instead of up to five.

The key is the model's serialized bytes and the options, so a model that differs in one byte
is compiled anew; a compile that fails is not remembered. The directory is made and removed
by tests/conftest.py (TCC_TEST_PACKS); workers wait on a per-pack lock while another compiles.
Packs are shared: open them, never write to them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from onnx import ModelProto

PACKS_ENV = "TCC_TEST_PACKS"


def _directory() -> Path:
    path = os.environ.get(PACKS_ENV)
    if path is None:  # imported outside pytest: a directory of this process's own
        path = os.environ[PACKS_ENV] = tempfile.mkdtemp(prefix="tcc-test-packs-")
    return Path(path)


def compiled_pack(model: ModelProto, **options) -> Path:
    """The path of `tcc.api.compile_to_bytes(model, **options)` written as a .tvmpack."""
    from tcc.api import compile_to_file

    digest = hashlib.sha256(model.SerializeToString())
    digest.update(repr(sorted(options.items())).encode())
    directory = _directory()
    path = directory / f"{digest.hexdigest()[:32]}.tvmpack"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():  # written from the weights where they lie: no joined copy
            compile_to_file(model, path, **options)
    return path


def compiled_fn(model: ModelProto, **options):
    """Like `tcc.compile_onnx`: `fn(*arrays) -> outputs`, with the loaded module as `fn.module`
    (a module of its own: setting its threads does not touch other tests')."""
    from tcc.api import load_fn

    return load_fn(compiled_pack(model, **options))
