"""PyTorch OpInfo conformance (torch_opinfo.py): on a deterministic sample of the float32
samples of the core ATen ops, the compiled pass count must not fall below the floor in
torch_floor.json, and the harness must tell a pass from a wrong result."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db imports it

from tests.conformance import torch_opinfo  # noqa: E402

FLOOR = json.loads(Path(__file__).with_name("torch_floor.json").read_text())
HARNESS = Path(torch_opinfo.__file__)


def test_compiled_pass_count_stays_above_floor(tmp_path):
    """Run as its own process: the harness forks its workers, and a fork of a process that
    has run torch's threads (as a test worker has) can deadlock in the child."""
    entry = FLOOR["compiled"]
    out = tmp_path / "summary.json"
    subprocess.run([sys.executable, str(HARNESS), "--mode", "compiled", "--sample",
                    str(entry["samples"]), "--json", str(out)], check=True, timeout=900,
                   capture_output=True)
    summary = json.loads(out.read_text())
    if summary["total"] != FLOOR["total"]:  # the floor counts the samples of one torch release
        pytest.skip(f"torch_floor.json was measured on {FLOOR['total']} samples (torch "
                    f"{FLOOR['torch']}); torch {torch.__version__} has {summary['total']}")
    groups = "\n".join(f"  {g['cases']:4d} {g['status']}: {g['message']}"
                       for g in summary["failure_groups"][:15])
    assert summary["pass"] >= entry["floor"], (
        f"{summary['pass']}/{summary['cases']} OpInfo samples pass compiled, below the floor of "
        f"{entry['floor']} in torch_floor.json; failures:\n{groups}")


def test_a_wrong_result_is_told_from_a_pass(monkeypatch):
    case = next(c for c in torch_opinfo.collect("neg") if c.name.startswith("neg["))
    assert torch_opinfo.run_case(case, "reference").status == "pass"
    from tcc.frontend.torch import base

    monkeypatch.setitem(base.CONVERTERS, "aten.neg.default",
                        lambda ctx, node: node.arg(0, "self"))  # forgets the sign
    result = torch_opinfo.run_case(case, "reference")
    assert result.status == "wrong result" and "max abs error" in result.detail
