"""The two verifiers are one specification (tests/runtime_c/differential.py): on mutants of
real packs, re-sealed so every hash holds, tcc.rt and the C runtime accept the same packs and
refuse the others with the same message. A share of the 100,000-mutant run, on every run."""

import pytest

from tests.runtime_c.capi import build_runtime
from tests.runtime_c.differential import run
from tests.runtime_c.seeds import seed_packs
from tests.runtime_c.test_reader import HAVE_TOOLS

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("differential")
    return build_runtime(d / "build"), seed_packs(d)


@pytest.mark.parametrize("seed", [11, 12])
def test_both_verifiers_give_one_verdict_and_one_message(setup, seed):
    build, seeds = setup
    counts, disagreements = run(seeds, build / "libtccrt.so", 2500, seed)
    assert disagreements == []
    # the mutants reach every stage: accepted, the decoder, the verifier and its dataflow check
    assert all(counts[k] >= 50 for k in ("accepted", "decoder", "verifier", "written-before-read")), counts
