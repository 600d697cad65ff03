"""Ctrl-C at any moment of a command, including while the CLI is still importing, prints
"interrupted" and exits 130: never a traceback. (One arriving during Python's own start-up
or shutdown kills the process by the signal, which a shell reports as 130 too.)"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

import tcc
from tests.cli.test_cli_output_paths import _model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("interrupt")
    onnx.save(_model(), d / "m.onnx")
    tcc.compile(_model(), output=d / "m.tvmpack")
    return d


COMMANDS = {
    "compile": ["compile", "m.onnx", "-o", "out.tvmpack"],
    "show": ["show", "m.tvmpack"],
    "run-c": ["run", "m.tvmpack", "--random-inputs", "--runtime", "c", "--bench", "1000000"],
    "run": ["run", "m.tvmpack", "--random-inputs", "--bench", "10000000"],
}


def _as_a_shell_starts_it():
    """A shell starts a foreground command with SIGINT delivered and handled by default,
    whatever this test process (a pytest worker, among other tests) has done with it: an
    ignored or blocked SIGINT is inherited across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _signal_state(pid: int) -> str:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no /proc status"
    return "; ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt", "State")))


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("delay", [0.2, 0.6, 1.5])
def test_sigint_prints_one_line_and_exits_130(files, command, delay):
    p = subprocess.Popen([sys.executable, "-m", "tcc", *COMMANDS[command]], cwd=files,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_as_a_shell_starts_it)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        state = _signal_state(p.pid)
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"still running 60 s after SIGINT ({state}); stdout {out[-200:]!r}, "
                    f"stderr {err[-400:]!r}")
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    if p.returncode in (0, -signal.SIGINT):  # it finished, or was in Python's own shutdown
        return
    assert p.returncode == 130, (p.returncode, err)
    assert err.strip().splitlines()[-1] == "interrupted", err


def test_an_interrupt_during_an_import_its_importer_swallows_is_raised_after_it(tmp_path):
    """numpy.random's import, the first time `tcc run --random-inputs` draws, turned a Ctrl-C
    into an error its importer caught, and the command ran on: a SIGINT that arrives during
    an import is raised again once the import is done."""
    (tmp_path / "swallowing.py").write_text(
        "import signal\n"
        "try:\n"
        "    signal.raise_signal(signal.SIGINT)\n"
        "    sum(range(1000))\n"
        "except BaseException:\n"
        "    pass\n")
    script = (
        "import signal, sys, time\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from tcc.cli import entry\n"
        "signal.signal(signal.SIGINT, entry._on_sigint)\n"
        "try:\n"
        "    import swallowing\n"
        "    deadline = time.monotonic() + 20\n"
        "    while time.monotonic() < deadline:\n"
        "        pass\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
        "sys.exit(1)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, preexec_fn=_as_a_shell_starts_it)
    assert r.returncode == 130, (r.returncode, r.stderr)
