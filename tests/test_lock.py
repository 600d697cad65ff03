"""requirements.lock and pyproject.toml agree: every declared requirement is pinned within its
range, and every pin is there for something declared (tools/lockfile.py)."""

import tomllib
from pathlib import Path

from tools.lockfile import check_files, disagreements, parse_lock

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCK = (ROOT / "requirements.lock").read_text()


def test_the_lock_and_pyproject_agree():
    assert check_files(ROOT / "pyproject.toml", ROOT / "requirements.lock") == []


def _with_dependency(pyproject: dict, requirement: str) -> dict:
    dependencies = [*pyproject["project"]["dependencies"], requirement]
    return dict(pyproject, project=dict(pyproject["project"], dependencies=dependencies))


def test_a_dependency_only_in_pyproject_is_reported():
    problems = disagreements(_with_dependency(PYPROJECT, "pandas>=2.0"), LOCK)
    assert problems == ["pyproject.toml: pandas>=2.0 is not in the lock (run `make lock`)"]


def test_a_pin_only_in_the_lock_is_reported():
    extra = "pandas==2.2.3 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via tcc (pyproject.toml)\n"
    problems = disagreements(PYPROJECT, LOCK + extra)
    assert len(problems) == 1
    assert "pandas==2.2.3 is there for pyproject.toml, which does not declare it" in problems[0]


def test_a_pin_outside_its_declared_range_is_reported():
    pinned = next(p for p in parse_lock(LOCK) if p.name == "click")
    narrowed = _with_dependency(PYPROJECT, f"click>{pinned.version}")
    assert any(f"click=={pinned.version} is outside" in p for p in disagreements(narrowed, LOCK))


def test_a_pin_without_hashes_or_reason_is_reported():
    bare = LOCK + "scipy==1.14.1\n"
    problems = disagreements(PYPROJECT, bare)
    assert any("scipy==1.14.1 has no hashes" in p for p in problems)
    assert any("scipy==1.14.1 says nothing asks for it" in p for p in problems)
