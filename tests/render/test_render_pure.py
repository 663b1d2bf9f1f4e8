"""render_job and render_sweep are pure: no catalogue lookup, no file written, no cache touched.

The run is loaded first (that reads the catalogue and may write its index cache); then, with
an empty cache directory, a read-only HOME, the catalogue loader made to fail and every way
of opening a file for writing refused, rendering must still give the same scripts.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from render_helpers import context, resolve

import hpceval.tasks
from hpceval.config import ResolvedConfig, with_tasks
from hpceval.render import render_job
from hpceval.render.sweep import render_sweep
from hpceval.tasks.loader import clear_memory_cache

RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m",
                      "tensor_parallel_size": 4},
       "evaluation": {"tasks": [{"name": "boxed_chat"}, {"name": "judged"},
                                {"name": "completion_probe"}]}}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@pytest.fixture
def loaded(tmp_path: Path) -> ResolvedConfig:
    return resolve("slurm", RUN, tmp_path)


@pytest.fixture
def before(loaded: ResolvedConfig) -> str:
    """The script rendered before the guards go up, for comparison."""
    return render_job(loaded, context(loaded))


@pytest.fixture
def no_io(before: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse (and record) every write; an empty cache; a read-only HOME; no catalogue."""
    attempts: list[str] = []
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    cache.mkdir()
    home.chmod(0o555)
    for name, value in (("HOME", home), ("XDG_CACHE_HOME", cache), ("HPCEVAL_CACHE_DIR", cache)):
        monkeypatch.setenv(name, str(value))
    clear_memory_cache()

    def no_catalogue() -> Any:
        attempts.append("load_catalogue()")
        raise AssertionError("render looked the catalogue up")

    real_open, real_os_open = builtins.open, os.open

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            attempts.append(f"open({file!r}, {mode!r})")
            raise PermissionError(f"render tried to write {file}")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _WRITE_FLAGS:
            attempts.append(f"os.open({path!r})")
            raise PermissionError(f"render tried to write {path}")
        return real_os_open(path, flags, *args, **kwargs)

    def refused(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{name}{args!r}")
            raise PermissionError(f"render called {name}")
        return call

    monkeypatch.setattr(hpceval.tasks, "load_catalogue", no_catalogue)
    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    for name in ("mkdir", "makedirs", "replace", "rename", "unlink", "mkstemp"):
        owner = __import__("tempfile") if name == "mkstemp" else os
        monkeypatch.setattr(owner, name, refused(name))
    for name in ("write_text", "write_bytes", "mkdir", "touch"):
        monkeypatch.setattr(Path, name, refused(f"Path.{name}"))
    yield attempts
    home.chmod(0o755)
    assert list(cache.iterdir()) == [] and list(home.iterdir()) == []


def test_render_job_does_no_io(loaded: ResolvedConfig, before: str, no_io: list[str]) -> None:
    assert render_job(loaded, context(loaded)) == before
    assert no_io == []


def test_render_sweep_does_no_io(loaded: ResolvedConfig, no_io: list[str]) -> None:
    models = [("a", loaded), ("b", loaded)]
    scripts = render_sweep(models, context(loaded))
    assert set(scripts.elements) == {"a", "b"} and "#SBATCH --array=0-1" in scripts.dispatcher
    assert no_io == []



def test_tasks_changed_after_loading_must_be_resolved_again(loaded: ResolvedConfig) -> None:
    evaluation = dataclasses.replace(loaded.spec.evaluation,
                                     tasks=loaded.spec.evaluation.tasks[:1])
    changed = dataclasses.replace(loaded, spec=dataclasses.replace(loaded.spec,
                                                                   evaluation=evaluation))
    with pytest.raises(ValueError, match="resolve them again"):
        render_job(changed, context(changed))
    script = render_job(with_tasks(changed), context(changed))
    assert script.count("\nharness_") == 1 and "boxed_chat" in script
