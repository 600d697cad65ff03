"""The pack cache (tcc.emit.pack_cache): a file compiled again with the same options and the
same tcc gives the pack of its first compile, and anything the compile read that changed
since (the file, its external data, an option, TCC_VERIFY) is a miss that compiles anew."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.api import StageTimes, compile_to_bytes, compile_to_file
from tcc.emit.pack_cache import PackCache


def _model(seed: int):
    rng = np.random.default_rng(seed)
    w = helper.make_tensor("w", TP.FLOAT, [64, 32],
                           rng.standard_normal(64 * 32).astype(np.float32).tobytes(), raw=True)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2, 32])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _compile(path, **options):
    times = StageTimes()
    return compile_to_bytes(path, times=times, **options), times


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TCC_PACK_CACHE_MB", raising=False)
    return tmp_path / "cache" / "packs"


def test_a_second_compile_is_the_first_ones_pack(tmp_path, cache):
    onnx.save(_model(0), tmp_path / "m.onnx")
    first, times = _compile(tmp_path / "m.onnx")
    assert not times.from_pack_cache and list(times.seconds)[0] == "cache"
    again, times = _compile(tmp_path / "m.onnx")
    assert times.from_pack_cache and list(times.seconds) == ["cache"]
    assert again == first == _compile(tmp_path / "m.onnx", cache=False)[0]


def test_a_source_of_a_size_no_entry_has_misses_without_a_lookup(tmp_path, cache,
                                                                  monkeypatch):
    """Entries are grouped by their source's size: a compile whose source has a size no
    entry has misses without hashing first. Its key is hashed beside the import by a thread
    that has ended before the kernels' processes are forked."""
    import threading

    import tcc.emit.cpu_kernels as cpu_kernels

    onnx.save(_model(0), tmp_path / "m.onnx")
    compile_kernels, lookup = cpu_kernels.compile_kernels, PackCache.lookup
    key_threads = []

    def compile_kernels_noting_threads(*args, **kwargs):
        key_threads.append([t for t in threading.enumerate() if t.name == "tcc-pack-cache-key"])
        return compile_kernels(*args, **kwargs)

    monkeypatch.setattr(cpu_kernels, "compile_kernels", compile_kernels_noting_threads)
    monkeypatch.setattr(PackCache, "lookup", lambda *a, **k: pytest.fail("looked up"))
    first, times = _compile(tmp_path / "m.onnx")
    assert not times.from_pack_cache and key_threads == [[]]
    (entry,) = cache.rglob("*.pack")
    assert entry.parent.name == str((tmp_path / "m.onnx").stat().st_size)
    monkeypatch.setattr(PackCache, "lookup", lookup)
    again, times = _compile(tmp_path / "m.onnx")
    assert times.from_pack_cache and again == first


def test_a_fifo_is_refused_not_hashed(tmp_path, cache):
    """The pack cache hashes only a regular file: a FIFO, which would block the read, has no
    key, and is the import's one-line error."""
    import threading

    from tcc.errors import TccError

    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    outcome = []

    def compile_fifo():
        try:
            compile_to_bytes(fifo)
        except TccError as e:
            outcome.append(str(e))

    worker = threading.Thread(target=compile_fifo, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the compile blocked reading the FIFO"
    assert outcome and "is a FIFO, not a regular file" in outcome[0]


def test_what_changes_the_compile_is_a_miss(tmp_path, cache, monkeypatch):
    onnx.save(_model(0), tmp_path / "m.onnx")
    first, _ = _compile(tmp_path / "m.onnx")
    for options in ({"optimize": False}, {"plan_memory": False}, {"disable_passes": ["fuse-ops"]}):
        data, times = _compile(tmp_path / "m.onnx", **options)
        assert not times.from_pack_cache, options
        assert data == _compile(tmp_path / "m.onnx", cache=False, **options)[0]
    verify = os.environ.get("TCC_VERIFY")
    monkeypatch.setenv("TCC_VERIFY", "0" if verify == "1" else "1")
    assert not _compile(tmp_path / "m.onnx")[1].from_pack_cache
    if verify is None:
        monkeypatch.delenv("TCC_VERIFY")
    else:
        monkeypatch.setenv("TCC_VERIFY", verify)
    assert _compile(tmp_path / "m.onnx")[1].from_pack_cache  # as it was: the first entry
    onnx.save(_model(1), tmp_path / "m.onnx")  # new weights, same kernels
    data, times = _compile(tmp_path / "m.onnx")
    assert not times.from_pack_cache and data != first


def test_changed_external_data_is_a_miss(tmp_path, cache):
    """An ONNX model may keep its weights in another file: the entry lists it, and a hit
    checks it again."""
    onnx.save(_model(0), tmp_path / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    first, times = _compile(tmp_path / "m.onnx")
    assert times.read == ["weights.bin"]
    assert _compile(tmp_path / "m.onnx")[1].from_pack_cache
    weights = tmp_path / "weights.bin"  # other weights, and the model file as it was
    weights.write_bytes(np.frombuffer(weights.read_bytes(), np.float32)[::-1].tobytes())
    data, times = _compile(tmp_path / "m.onnx")
    assert not times.from_pack_cache
    assert data != first and data == _compile(tmp_path / "m.onnx", cache=False)[0]
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(Exception, match="weights.bin"):  # no entry hides a missing file
        _compile(tmp_path / "m.onnx")


def test_a_damaged_entry_is_a_miss_and_is_written_again(tmp_path, cache):
    onnx.save(_model(0), tmp_path / "m.onnx")
    first, _ = _compile(tmp_path / "m.onnx")
    (entry,) = cache.rglob("*.pack")
    raw = bytearray(entry.read_bytes())
    raw[-10] ^= 0xFF
    entry.write_bytes(bytes(raw))
    data, times = _compile(tmp_path / "m.onnx")
    assert not times.from_pack_cache and data == first
    assert _compile(tmp_path / "m.onnx")[1].from_pack_cache


def test_off_and_bypassed(tmp_path, cache, monkeypatch):
    onnx.save(_model(0), tmp_path / "m.onnx")
    _compile(tmp_path / "m.onnx", cache=False)
    assert not cache.exists()
    monkeypatch.setenv("TCC_PACK_CACHE_MB", "0")
    _compile(tmp_path / "m.onnx")
    _, times = _compile(tmp_path / "m.onnx")
    assert not cache.exists() and not times.from_pack_cache and "cache" not in times.seconds


def test_the_least_recently_used_entries_go_first(tmp_path):
    packs = PackCache(tmp_path / "packs", limit=3500)  # three entries of 1000 bytes and a header
    source = tmp_path / "m.onnx"
    source.write_bytes(b"model")
    for i, key in enumerate(["5/aa01", "5/bb02", "7/cc03"]):
        packs.put(key, bytes(1000), source, [], {})
        os.utime(packs._path(key), ns=(i * 10**9, i * 10**9))
    assert packs.get("5/aa01", source) is not None  # used now: the newest
    packs.put("7/dd04", bytes(1000), source, [], {})
    kept = sorted(f"{p.parent.name}/{p.name}" for p in (tmp_path / "packs").rglob("*")
                  if p.is_file())
    assert kept == ["5/aa01", "5/aa01.pack", "7/cc03", "7/cc03.pack", "7/dd04", "7/dd04.pack"]


def test_an_entry_shares_the_output_written(tmp_path, cache):
    """A compile that writes its output links the entry's pack to it (one write of the pack,
    not two); the output changed in place afterwards is a miss, not a wrong pack."""
    onnx.save(_model(0), tmp_path / "m.onnx")
    out = tmp_path / "m.tvmpack"
    size = compile_to_file(tmp_path / "m.onnx", out)
    first = out.read_bytes()
    assert first == compile_to_bytes(tmp_path / "m.onnx", cache=False) and size == len(first)
    (entry,) = cache.rglob("*.pack")
    assert os.path.samefile(entry, out)
    hit = tmp_path / "hit.tvmpack"
    times = StageTimes()
    assert compile_to_file(tmp_path / "m.onnx", hit, times=times) == len(first)
    assert times.from_pack_cache and hit.read_bytes() == first
    assert not os.path.samefile(hit, out)  # a hit writes a file of its own
    with open(out, "r+b") as f:  # in place, as `cp other.tvmpack m.tvmpack` writes
        f.write(b"\0" * 64)
    times = StageTimes()
    assert compile_to_bytes(tmp_path / "m.onnx", times=times) == first
    assert not times.from_pack_cache


def test_an_output_that_is_no_file_is_copied(tmp_path, cache):
    onnx.save(_model(0), tmp_path / "m.onnx")
    compile_to_file(tmp_path / "m.onnx", os.devnull)
    first = compile_to_bytes(tmp_path / "m.onnx", cache=False)
    (entry,) = cache.rglob("*.pack")
    assert entry.read_bytes() == first and entry.stat().st_nlink == 1
    times = StageTimes()
    assert compile_to_bytes(tmp_path / "m.onnx", times=times) == first and times.from_pack_cache


def test_a_hit_written_to_a_file_is_checked_as_it_is_copied(tmp_path, cache):
    """A hit copies the entry to the output through a small buffer, checking it on the way:
    a damaged entry leaves the output to the compile (no damaged pack, no temporary), and
    an output that cannot be written is the compile's one-line error."""
    from tcc.emit.pack import PackWriteError

    onnx.save(_model(0), tmp_path / "m.onnx")
    first = compile_to_bytes(tmp_path / "m.onnx")
    (entry,) = cache.rglob("*.pack")
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    entry.write_bytes(bytes(raw))
    out = tmp_path / "out" / "m.tvmpack"
    out.parent.mkdir()
    times = StageTimes()
    assert compile_to_file(tmp_path / "m.onnx", out, times=times) == len(first)
    assert not times.from_pack_cache and out.read_bytes() == first
    assert os.listdir(out.parent) == ["m.tvmpack"]
    times = StageTimes()
    compile_to_file(tmp_path / "m.onnx", tmp_path / "again.tvmpack", times=times)
    assert times.from_pack_cache and (tmp_path / "again.tvmpack").read_bytes() == first
    with pytest.raises(PackWriteError, match="no-such-folder"):
        compile_to_file(tmp_path / "m.onnx", tmp_path / "no-such-folder" / "m.tvmpack")
