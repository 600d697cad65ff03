"""The compile cache: entries found again only under the same key, written whole, checked
when read, and a cache that cannot be used costs time, never the compile."""

from __future__ import annotations

from tcc.emit.object_cache import ObjectCache, cache_dir


def test_an_entry_comes_back_under_its_key_only(tmp_path):
    cache = ObjectCache(tmp_path)
    key = ObjectCache.key("llvm", "rules", "def f(): ...")
    assert cache.get(key) is None
    cache.put(key, b"\x7fELF object")
    assert cache.get(key) == b"\x7fELF object"
    for other in (("llvm -mcpu=x", "rules", "def f(): ..."), ("llvm", "tuned", "def f(): ..."),
                  ("llvm", "rules", "def g(): ...")):
        assert ObjectCache.key(*other) != key and cache.get(ObjectCache.key(*other)) is None
    assert not [p for p in tmp_path.rglob(".tmp-*")]  # nothing half-written left behind


def test_an_entry_cut_short_or_changed_on_disk_is_a_miss_and_is_written_again(tmp_path):
    cache = ObjectCache(tmp_path)
    key = ObjectCache.key("llvm", "rules", "def f(): ...")
    cache.put(key, b"object code")
    (path,) = [p for p in tmp_path.rglob("*") if p.is_file()]
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])
    assert cache.get(key) is None
    path.write_bytes(whole[:-1] + b"X")
    assert cache.get(key) is None
    cache.put(key, b"object code")
    assert cache.get(key) == b"object code"


def test_a_cache_that_cannot_be_written_or_read_is_only_a_miss(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    cache = ObjectCache(blocked / "objects")
    key = ObjectCache.key("llvm", "rules", "def f(): ...")
    cache.put(key, b"object code")  # no exception
    assert cache.get(key) is None


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TCC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "tcc" / "objects"
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
