"""Run-wide setup: the directory of packs that tests/packs.py shares between the workers,
compile caches of the run's own (TCC_CACHE_DIR: tests neither read nor fill the user's;
whole packs up to 512 MB),
and TCC_VERIFY=1, so that every compile in the suite proves each kernel's buffer accesses in
bounds after every pass (tcc/ir/verify.py; a run started with TCC_VERIFY=0 skips that).

The process that starts the run (the xdist controller, or pytest alone) makes the
directories before any worker starts, so the workers inherit their paths, and removes them
when the run ends."""

import os
import shutil
import tempfile

import pytest

from tests.packs import PACKS_ENV

_OWNED = pytest.StashKey[dict]()
CACHE_ENV = "TCC_CACHE_DIR"


def pytest_configure(config):
    os.environ.setdefault("TCC_VERIFY", "1")
    # the run's packs cached whole stay within a bound of disk (tcc.emit.pack_cache)
    os.environ.setdefault("TCC_PACK_CACHE_MB", "512")
    owned = config.stash[_OWNED] = {}
    for env, prefix in ((PACKS_ENV, "tcc-test-packs-"), (CACHE_ENV, "tcc-test-cache-")):
        if env not in os.environ:
            owned[env] = os.environ[env] = tempfile.mkdtemp(prefix=prefix)


def pytest_unconfigure(config):
    for env, path in config.stash.get(_OWNED, {}).items():
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(env, None)
