"""The field names of the IR's dataclasses, looked up once per class: the generic walks and
rewrites (substitution, structural keys, schedule rewrites) ask for them at every node, and
`dataclasses.fields` builds its answer anew each time."""

from __future__ import annotations

import dataclasses
import functools


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def field_names(node) -> tuple[str, ...]:
    """The names of a dataclass instance's fields, in declaration order."""
    return _names(type(node))
