"""The `tcc` console script. Importing the CLI (click, rich, numpy, the compiler) takes a
moment, and a Ctrl-C then must say "interrupted" and exit 130 as one later on does, never
print a traceback. A KeyboardInterrupt inside an extension module's import is printed by
the extension itself and turned into an ImportError ("numpy._core.multiarray failed to
import"), so while the CLI imports, a SIGINT is only recorded, and acted on once the import
is done. Afterwards it raises KeyboardInterrupt as usual, and is still recorded, so that an
error an extension makes of it is reported as the interrupt it is (tcc/cli/main.py asks
`interrupted()`). An import can still happen later, inside a command (numpy.random's, the
first time `tcc run --random-inputs` draws), and its importer may catch the error the
extension makes of the interrupt: `tcc run` then ran on for minutes. So a SIGINT that
arrives during an import is raised again once the import is done. Python's own start-up,
before this module runs, is not covered."""

from __future__ import annotations

import signal
import sys

_SIGINT_SEEN = [False]


def interrupted() -> bool:
    """Whether a SIGINT has arrived in this process."""
    return _SIGINT_SEEN[0]


def _record_sigint(signum, frame):
    _SIGINT_SEEN[0] = True


def _importing(frame) -> bool:
    """Whether `frame` runs inside an import (a frame of importlib's bootstrap is below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


RETRY_S = 0.02  # how soon an interrupt that arrived during an import is delivered again


def _on_sigint(signum, frame):
    _SIGINT_SEEN[0] = True
    if _importing(frame):
        import _thread
        import threading

        again = threading.Timer(RETRY_S, _thread.interrupt_main, args=(signal.SIGINT,))
        again.daemon = True
        again.start()
        return
    raise KeyboardInterrupt


def exit_interrupted():
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, KeyboardInterrupt):
        pass
    sys.exit(130)


def main(argv=None):
    handle = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not ignored by the caller
    if handle:
        signal.signal(signal.SIGINT, _record_sigint)
    try:
        from tcc.cli.main import main as run
    except Exception:
        if interrupted():
            exit_interrupted()
        raise
    if handle:
        signal.signal(signal.SIGINT, _on_sigint)
    if interrupted():
        exit_interrupted()
    try:
        return run(argv)
    except KeyboardInterrupt:
        exit_interrupted()
    except Exception:
        if interrupted():
            exit_interrupted()
        raise
