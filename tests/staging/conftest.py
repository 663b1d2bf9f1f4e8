"""Fixtures for staging, preflight and discover: the strict fake apptainer (and skopeo, enroot,
ch-image and ch-convert when enabled) on PATH, a fake registry, isolated catalogue homes, and
an Apptainer site in tmp_path."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from staging_helpers import DATA, FDF_PATH, LM_EVAL, SIMPLE_EVALS, Fakes, Site, digest

from hpceval.tasks.loader import clear_memory_cache


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Catalogue homes in tmp_path, no user catalogues, no profile from the shell."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    for name in ("HPCEVAL_TASKS_PATH", "HPCEVAL_PROFILE", "HF_TOKEN", "JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    clear_memory_cache()
    yield tmp_path
    clear_memory_cache()


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fakes:
    """apptainer (the strict fake) first on PATH; skopeo and singularity only when enabled, so
    the "skopeo is missing" path is the default."""
    fake = Fakes(tmp_path / "fakebin", tmp_path / "registry.json", tmp_path / "calls.jsonl")
    fake.bin.mkdir()
    fake.registry_file.write_text(json.dumps({"images": {}}))
    fake.enable("apptainer")
    # Only the fakes and the basics: a real apptainer/skopeo here must not be used by a test.
    monkeypatch.setenv("PATH", f"{fake.bin}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_REGISTRY", str(fake.registry_file))
    monkeypatch.setenv("FAKE_APPTAINER_LOG", str(fake.log_file))
    # the fake ch-image's storage (its default is /var/tmp/$USER.ch, outside the test)
    monkeypatch.setenv("CH_IMAGE_STORAGE", str(tmp_path / "ch-storage"))
    fake.add_image(SIMPLE_EVALS, digest(1),
                   {FDF_PATH: (DATA / "simple_evals_framework.yml").read_text()})
    fake.add_image(LM_EVAL, digest(2))
    return fake


@pytest.fixture
def site(tmp_path: Path) -> Site:
    (tmp_path / "hf").mkdir()
    return Site(tmp_path)
