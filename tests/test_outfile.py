"""tcc/outfile.py: outputs appear whole or not at all, never in place of a device or FIFO,
and temporaries left by a killed writer are removed by the next one."""

import os
import stat
import subprocess
import sys
import threading

import pytest

from tcc.errors import TccError
from tcc.outfile import Staged, open_output, scratch_dir, write_output

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


@needs_root
def test_a_character_device_is_written_into_never_replaced(tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    write_output(dev, b"x" * 40000)
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null"]


@needs_root
def test_a_full_device_is_an_error_and_stays(tmp_path):
    dev = tmp_path / "full"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full: every write fails
    with pytest.raises(TccError, match=r"full: cannot write: No space left"):
        write_output(dev, b"x" * 10)
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_a_fifo_receives_the_bytes(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, b"hello" * 1000)
    reader.join(10)
    assert got == [b"hello" * 1000] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(TccError, match=r"is a directory; give the path of a file"):
        write_output(tmp_path, b"x")


def test_a_symlink_is_followed_and_kept(tmp_path):
    (tmp_path / "real").write_bytes(b"old")
    (tmp_path / "link").symlink_to("real")
    write_output(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real").read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), open_output(target) as f:
        f.write(b"half")
        raise RuntimeError
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out"]


def test_missing_folder_is_one_error(tmp_path):
    with pytest.raises(TccError, match=r"nope/out: cannot write: No such file"):
        write_output(tmp_path / "nope" / "out", b"x")


def test_discarded_stage_leaves_nothing(tmp_path):
    s = Staged(tmp_path / "out")
    s.file.write(b"abc")
    s.discard()
    s.discard()
    assert os.listdir(tmp_path) == []


_KILLED_WRITER = """
import os, sys
from tcc.outfile import Staged, scratch_dir
s = Staged(sys.argv[1])
s.file.write(b"partial"); s.file.flush()
with scratch_dir("tcc-test-scratch-") as d:
    print(d, flush=True)
    os.kill(os.getpid(), 9)
"""


def test_a_killed_writers_temporaries_are_removed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    target = tmp_path / "out.tvmpack"
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(target)], capture_output=True, text=True)
    assert r.returncode == -9
    left = [n for n in os.listdir(tmp_path) if n.startswith(".out.tvmpack.")]
    assert len(left) == 1 and left[0].endswith(".tmp")
    scratch = r.stdout.strip()
    assert os.path.isdir(scratch)

    (tmp_path / ".out.tvmpack.tcc-00000000-1-ab.tmp").write_bytes(b"another host's")
    write_output(target, b"whole")
    assert sorted(os.listdir(tmp_path)) == [".out.tvmpack.tcc-00000000-1-ab.tmp", "out.tvmpack", "tmp"]
    assert target.read_bytes() == b"whole"

    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    with scratch_dir("tcc-test-scratch-") as fresh:
        assert os.path.isdir(fresh)
    assert not os.path.exists(scratch) and not os.path.exists(fresh)


def test_a_live_writers_temporary_is_kept(tmp_path):
    s = Staged(tmp_path / "out")  # this process is alive: its temporary is not stale
    child = subprocess.run([sys.executable, "-c",
                            "import sys; from tcc.outfile import write_output; write_output(sys.argv[1], b'x')",
                            str(tmp_path / "out")], check=True)
    assert child.returncode == 0 and len(os.listdir(tmp_path)) == 2
    s.discard()
    assert os.listdir(tmp_path) == ["out"]
