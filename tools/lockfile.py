"""requirements.lock against pyproject.toml: what `make install` installs and what tcc declares.

The lock is `uv pip compile`'s output for tcc's dependencies, its `test` extra and its `build`
dependency group (`make lock`). `disagreements()` lists every way the two files part: a
declared requirement with no pin, a pin outside its declared range, a pin that nothing
declared asks for, a pin without hashes. tests/test_lock.py holds main to an empty list.

`python tools/lockfile.py --installed requirements.lock` prints where this interpreter's
installed distributions differ from the lock (`make test-latest` uses it to say which newer
releases the suite ran on).
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCKED_EXTRAS = ("test",)
LOCKED_GROUPS = ("build",)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
_SELF = re.compile(r"^tcc \((pyproject\.toml(?::[\w-]+)?)\)$")


@dataclass
class Pin:
    name: str  # canonical (PEP 503)
    version: Version
    marker: Marker | None
    line: int
    hashes: int = 0
    via: list[str] = field(default_factory=list)

    def applies(self, env: dict | None = None) -> bool:
        return self.marker is None or self.marker.evaluate(env)


def parse_lock(text: str) -> list[Pin]:
    """The pins of a `uv pip compile --generate-hashes` file with its `# via` annotations."""
    pins: list[Pin] = []
    in_via = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if not raw[0].isspace() and not line.startswith("#"):
            match = _PIN.match(line)
            if not match:
                raise ValueError(f"lock line {number}: not a `name==version` pin: {line!r}")
            name, version, marker = match.groups()
            pins.append(
                Pin(canonicalize_name(name), Version(version), marker and Marker(marker), number)
            )
            in_via = False
        elif line.startswith("--hash=") and pins:
            pins[-1].hashes += 1
        elif line.startswith("# via") and pins:
            rest = line[len("# via") :].strip()
            if rest:
                pins[-1].via.append(rest)
            in_via = not rest
        elif in_via and line.startswith("#   "):
            pins[-1].via.append(line[1:].strip())
    return pins


def declared(pyproject: dict) -> dict[str, list[Requirement]]:
    """What the lock must cover, by the source label uv writes in its `# via` lines."""
    project = pyproject["project"]
    extras = project.get("optional-dependencies", {})
    groups = pyproject.get("dependency-groups", {})
    main = [Requirement(r) for r in project.get("dependencies", [])]
    for extra in LOCKED_EXTRAS:
        main += [Requirement(r) for r in extras.get(extra, []) if not r.startswith("tcc[")]
    sources = {"pyproject.toml": main}
    for group in LOCKED_GROUPS:
        sources[f"pyproject.toml:{group}"] = [Requirement(r) for r in groups.get(group, [])]
    return sources


def disagreements(pyproject: dict, lock_text: str) -> list[str]:
    """Every way the lock and pyproject.toml disagree, one line each; empty when in step."""
    pins = parse_lock(lock_text)
    sources = declared(pyproject)
    by_name: dict[str, list[Pin]] = {}
    for pin in pins:
        by_name.setdefault(pin.name, []).append(pin)
    wanted = {label: {canonicalize_name(r.name) for r in reqs} for label, reqs in sources.items()}
    problems = []
    for label, reqs in sources.items():
        for req in reqs:
            name = canonicalize_name(req.name)
            if name not in by_name:
                problems.append(f"{label}: {req} is not in the lock (run `make lock`)")
                continue
            for pin in by_name[name]:
                if not req.specifier.contains(pin.version, prereleases=True):
                    problems.append(
                        f"lock line {pin.line}: {name}=={pin.version} is outside {label}'s "
                        f"{req} (run `make lock`)"
                    )
    build = pyproject.get("build-system", {}).get("requires", [])
    for text in build:
        req = Requirement(text)
        if canonicalize_name(req.name) not in wanted.get("pyproject.toml:build", set()):
            problems.append(
                f"pyproject.toml: build-system requires {req}, which the build dependency "
                "group does not (make install builds tcc from the lock, without isolation)"
            )
    for pin in pins:
        where = f"lock line {pin.line}: {pin.name}=={pin.version}"
        if pin.hashes == 0:
            problems.append(f"{where} has no hashes (run `make lock`)")
        if not pin.via:
            problems.append(f"{where} says nothing asks for it (run `make lock`)")
        for via in pin.via:
            own = _SELF.match(via)
            if own:
                if pin.name not in wanted.get(own.group(1), set()):
                    problems.append(
                        f"{where} is there for {own.group(1)}, which does not declare it "
                        "(run `make lock`)"
                    )
            elif canonicalize_name(via) not in by_name:
                problems.append(f"{where} is there for {via}, which is not locked")
    return problems


def check_files(pyproject: Path, lock: Path) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)
    return disagreements(project, lock.read_text())


def installed_differences(lock_text: str) -> list[str]:
    """Distributions installed here at another version than this interpreter's pin."""
    lines = []
    for pin in parse_lock(lock_text):
        if not pin.applies():
            continue
        try:
            have = Version(metadata.version(pin.name))
        except metadata.PackageNotFoundError:
            lines.append(f"{pin.name}: locked {pin.version}, not installed")
            continue
        if have != pin.version:
            lines.append(f"{pin.name}: locked {pin.version}, installed {have}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--installed":
        print("usage: python tools/lockfile.py --installed requirements.lock", file=sys.stderr)
        return 2
    differences = installed_differences(Path(argv[1]).read_text())
    print("versions that differ from the lock:" if differences else "every pin as locked")
    for line in differences:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
