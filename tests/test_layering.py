"""The rooms of DESIGN.md §2: each package imports only the packages it is allowed to."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tcc"

ALLOWED = {
    "target": set(),
    "ir": set(),
    "frontend": {"ir"},
    "lower": {"ir", "target"},
    "tune": {"lower", "emit", "rt", "ir", "target"},
    "emit": {"lower", "ir", "target", "rt.format"},
    "rt": set(),
    "cli": {"ir", "frontend", "lower", "tune", "emit", "rt", "target"},
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):  # lazy imports inside functions count too
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from tcc import ir` names a room too
                if node.module == "tcc":
                    yield node.lineno, f"tcc.{alias.name}"


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "tcc" and len(parts) > 1 else None


def violations(room: str, allowed: set[str], root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / room).rglob("*.py")):
        for line, module in _imports(path):
            other = _room_of(module)
            if other is None or other == room or other not in ALLOWED:
                continue
            dotted = ".".join(module.split(".")[1:3])
            if other not in allowed and dotted not in allowed:
                bad.append(f"{path.relative_to(root.parent)}:{line}: imports {module}")
    return bad


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_allowed_packages(room):
    assert violations(room, ALLOWED[room]) == []


def test_checker_catches_a_violation(tmp_path):
    """The checker itself must be able to fail."""
    fake = tmp_path / "tcc"
    (fake / "ir").mkdir(parents=True)
    (fake / "ir" / "bad.py").write_text("def f():\n    from tcc.frontend.onnx import from_onnx\n")
    assert violations("ir", set(), root=fake) == ["tcc/ir/bad.py:2: imports tcc.frontend.onnx"]
