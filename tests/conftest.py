"""Run-wide setup: the directory of packs that tests/packs.py shares between the workers,
and TCC_VERIFY=1, so that every compile in the suite proves each kernel's buffer accesses in
bounds after every pass (tcc/ir/verify.py; a run started with TCC_VERIFY=0 skips that).

The process that starts the run (the xdist controller, or pytest alone) makes the directory
before any worker starts, so the workers inherit its path, and removes it when the run ends."""

import os
import shutil
import tempfile

import pytest

from tests.packs import PACKS_ENV

_OWNED = pytest.StashKey[str]()


def pytest_configure(config):
    os.environ.setdefault("TCC_VERIFY", "1")
    if PACKS_ENV not in os.environ:
        path = os.environ[PACKS_ENV] = tempfile.mkdtemp(prefix="tcc-test-packs-")
        config.stash[_OWNED] = path


def pytest_unconfigure(config):
    path = config.stash.get(_OWNED, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(PACKS_ENV, None)
