"""Reading input files: a path a command reads must name a regular file.

A FIFO would block the reader until someone writes to it, and a device such as /dev/zero
never ends; so both are refused, by name, before anything opens them. (tcc.rt's pack reader,
which ships without the rest of tcc, makes the same check on its own.)

Imports nothing of tcc.
"""

from __future__ import annotations

import os
import stat


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages ("a FIFO", "a character device", ...)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def not_a_file(path) -> str | None:
    """Why `path` cannot be read as a file ("no such file", "is a FIFO, not a regular file;
    ..."), or None when it is a regular file (links followed)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    return f"is {file_kind(st.st_mode)}, not a regular file; give the path of a file"
