"""Measurement work that crashes or hangs its worker, for the tuner's robustness tests.

Kept in a module of its own that imports little: the worker unpickles the work, importing
its module, inside the measurement's timeout (importing a test module, with onnx behind
it, took over 2 s on a slow machine, so the default schedule itself timed out).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tcc.tune.measure import _time_calls


def crash_on(bad, shared, arrays, repeats, threads, baseline=None):
    """Kills its worker on the candidate `bad`, as the kernel of a candidate gone wrong might."""
    if shared == bad:
        os.kill(os.getpid(), signal.SIGKILL)
    return _time_calls(shared, arrays, repeats, threads, baseline)


def hang_on(bad, shared, arrays, repeats, threads, baseline=None):
    if shared == bad:
        time.sleep(60)
    return _time_calls(shared, arrays, repeats, threads, baseline)


def fail_on_call(counter: str, how: str, shared, arrays, repeats, threads, baseline=None):
    """`_time_calls`, except that the call the counter file counts down to crashes or hangs
    its worker."""
    left = int(Path(counter).read_text())
    Path(counter).write_text(str(left - 1))
    if left == 0:
        if how == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    return _time_calls(shared, arrays, repeats, threads, baseline)
