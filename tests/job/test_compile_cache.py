"""Compile caches kept across jobs (hpceval.job.compile_cache): seeded into a server's private
folder, published back as a union under a lock, and refused when others could write them."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from hpceval.job import compile_cache
from hpceval.job.compile_cache import main, publish, seed


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _contents(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_what_one_job_compiled_seeds_the_next(tmp_path: Path) -> None:
    store = tmp_path / "store" / "vllm-m-1"
    assert "nothing published" in seed(str(store), str(tmp_path / "none"))
    first = _tree(tmp_path / "first", {"inductor/fx/ab": "graph",
                                       "vllm/torch_compile_cache/x": "aot"})
    assert "2 new files" in publish(str(store), str(first))
    assert os.stat(store).st_mode & 0o777 == 0o700
    second = tmp_path / "second"
    second.mkdir(mode=0o700)
    assert seed(str(store), str(second)).startswith("2 files")
    assert _contents(second) == _contents(first)
    assert "nothing new" in publish(str(store), str(second))  # what it was seeded with


def test_concurrent_jobs_each_add_what_they_compiled(tmp_path: Path) -> None:
    store = tmp_path / "store"
    publish(str(store), str(_tree(tmp_path / "a", {"inductor/a": "A", "shared": "1"})))
    kept = os.stat(store / "current" / "inductor" / "a").st_ino
    publish(str(store), str(_tree(tmp_path / "b", {"inductor/b": "B", "shared": "2"})))
    assert _contents(store / "current") == {"inductor/a": "A", "inductor/b": "B", "shared": "1"}
    # the first job's files stay where they are (linked, not copied again)
    assert os.stat(store / "current" / "inductor" / "a").st_ino == kept
    assert sorted(p.name for p in store.iterdir()) == [".lock", "current"]  # nothing left over


@pytest.mark.parametrize("spoil", ["group-writable", "link"])
def test_a_store_others_could_write_is_not_used(tmp_path: Path, spoil: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real"
    publish(str(real), str(_tree(tmp_path / "a", {"kernel.so": "planted?"})))
    store = real
    if spoil == "group-writable":
        os.chmod(real, 0o770)
    else:
        store = tmp_path / "link"
        store.symlink_to(real)
    cache = tmp_path / "cache"
    cache.mkdir()
    assert main(["seed", str(store), str(cache)]) == 0  # the server starts regardless
    assert list(cache.iterdir()) == []
    said = capsys.readouterr().err
    assert said.startswith("hpceval: compile cache: not used: ") and str(store) in said
    assert main(["publish", str(store), str(_tree(tmp_path / "b", {"new": "x"}))]) == 0
    assert _contents(real / "current") == {"kernel.so": "planted?"}


def test_a_lock_held_too_long_skips_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    publish(str(store), str(_tree(tmp_path / "a", {"f": "1"})))
    monkeypatch.setattr(compile_cache, "SEED_WAIT_S", 0.2)
    held = os.open(store / ".lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # a publish under way, and stuck
    try:
        cache = tmp_path / "cache"
        cache.mkdir()
        assert main(["seed", str(store), str(cache)]) == 0
    finally:
        os.close(held)
    assert "its lock was held for over 0 s" in capsys.readouterr().err
    assert list(cache.iterdir()) == []


def test_a_publish_cut_short_is_removed_a_day_later(tmp_path: Path) -> None:
    store = tmp_path / "store"
    publish(str(store), str(_tree(tmp_path / "a", {"f": "1"})))
    fresh, stale = store / ".incoming-fresh", store / ".incoming-stale"
    for folder in (fresh, stale):
        _tree(folder, {"half": "written"})
    day_ago = time.time() - compile_cache.STALE_S - 60
    os.utime(stale, (day_ago, day_ago))
    publish(str(store), str(_tree(tmp_path / "b", {"g": "2"})))
    assert fresh.exists() and not stale.exists()


def test_a_huge_cache_is_not_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_cache, "PUBLISH_LIMIT", 10)
    store = tmp_path / "store"
    said = publish(str(store), str(_tree(tmp_path / "a", {"big": "x" * 11})))
    assert "over the" in said and not (store / "current").exists()


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["seed"]) == 2
    assert "seed|publish STORE CACHE" in capsys.readouterr().err
