"""Run-wide setup: the directory of packs that tests/packs.py shares between the workers.

The process that starts the run (the xdist controller, or pytest alone) makes it before any
worker starts, so the workers inherit its path, and removes it when the run ends."""

import os
import shutil
import tempfile

import pytest

from tests.packs import PACKS_ENV

_OWNED = pytest.StashKey[str]()


def pytest_configure(config):
    if PACKS_ENV not in os.environ:
        path = os.environ[PACKS_ENV] = tempfile.mkdtemp(prefix="tcc-test-packs-")
        config.stash[_OWNED] = path


def pytest_unconfigure(config):
    path = config.stash.get(_OWNED, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(PACKS_ENV, None)
