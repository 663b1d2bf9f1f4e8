"""Fixtures for the render tests: a fixed catalogue, isolated paths, and a render helper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from render_helpers import DATA, SITE_ENV, RenderFn, context, resolve

from hpceval.backends.slurm.partitions import Partition
from hpceval.render import JobContext, render_job
from hpceval.tasks import Catalogue
from hpceval.tasks.loader import build_index


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return Catalogue.from_index(build_index(sorted(DATA.glob("*.yaml"))))


@pytest.fixture(autouse=True)
def site_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[None]:
    # Profiles expand $SCRATCH/$WORK/~; user profile folders must not leak into the tests.
    for name, value in SITE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    # The config layer checks task names against the catalogue: add the test catalogue to it.
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(DATA))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    # Scripts must not depend on the machine's Slurm: every partition is there and unlimited,
    # no QOS or association limit is learned (tests/backends/slurm/test_partitions.py covers
    # those with a strict fake sinfo and sacctmgr).
    monkeypatch.setattr("hpceval.backends.slurm.partitions.partition_info",
                        lambda p: Partition(p, True, None))
    monkeypatch.setattr("hpceval.backends.slurm.partitions.qos_max_minutes", lambda _q: None)
    monkeypatch.setattr("hpceval.backends.slurm.partitions.qos_info", lambda _q: None)
    monkeypatch.setattr("hpceval.backends.slurm.partitions.partition_qos", lambda _p: None)
    monkeypatch.setattr("hpceval.backends.slurm.partitions.job_association",
                        lambda _p, _a: None)
    yield


@pytest.fixture
def render(tmp_path: Path) -> RenderFn:
    def _render(profile: str, run: dict[str, Any], overrides: list[str] | None = None,
                **ctx: Any) -> str:
        resolved = resolve(profile, run, tmp_path, overrides)
        job = context(resolved)
        if ctx:
            job = JobContext(**{**job.__dict__, **ctx})
        return render_job(resolved, job)

    return _render




@pytest.fixture
def render_pull(tmp_path: Path) -> RenderFn:
    """The run's pull job script (render/pull.py) for one model; '' when it has none."""
    from hpceval.render.pull import render_pull as pull_job

    def _render(profile: str, run: dict[str, Any], overrides: list[str] | None = None,
                **ctx: Any) -> str:
        resolved = resolve(profile, run, tmp_path, overrides)
        pull = pull_job([resolved], context(resolved))
        return pull.script if pull is not None else ""

    return _render
