"""A run referenced by path or by an id prefix in a shared output directory (review F6): another
uid (`runuser -u nobody`) plants a folder named like a prefix of the victim's ids, holding a copy
of the victim's run.json and a jobs.json naming an unrelated job of the victim. `kill`, `info`
and `status` must not act on it: an id or prefix goes to the registry, a path must be a run
directory of the user's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from second_user import as_nobody, shared_scratch
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.runs.control import kill_run
from hpceval.runs.index import RunNotFound, find_run, ref_from_dir
from hpceval.runs.submit import submit_configs


@pytest.fixture(autouse=True)
def no_real_slurm(monkeypatch: pytest.MonkeyPatch, fake: FakeSlurm) -> None:
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Not pytest's tmp_path: that is private to root (0700), and nobody must reach the tree."""
    with shared_scratch("hpceval-refs-") as base:
        yield base


def _plant(tmp_path: Path, fake: FakeSlurm) -> tuple[Path, Path, str]:
    """The victim's run in a 1777 output dir, and the attacker's folder next to it."""
    result = submit_configs(configs(tmp_path / "a"), fake)
    out = result.run_dir.parent
    out.chmod(0o1777)
    for folder in (tmp_path / "a", out.parent):
        folder.chmod(0o755)
    fake.states["4242"] = "RUNNING"  # the victim's unrelated training job
    prefix = result.invocation_id[:13]
    evil = out / prefix
    planted_run = json.loads((result.run_dir / "run.json").read_text())
    as_nobody("mkdir", str(evil))
    jobs = {"chain": [{"id": "4242", "kind": "slurm", "role": "main", "models": [0],
                       "sweep": False, "submitted_at": 0}], "jobs": ["4242"], "kind": "slurm",
            "schema": 2}
    for name, data in (("run.json", planted_run), ("jobs.json", jobs)):
        staging = tmp_path / f"planted-{name}"
        staging.write_text(json.dumps(data))
        staging.chmod(0o644)
        as_nobody("cp", str(staging), str(evil / name))
    assert evil.stat().st_uid == 65534
    return result.run_dir, evil, result.invocation_id


def test_a_prefix_that_names_a_planted_folder_goes_to_the_registry(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, evil, invocation = _plant(tmp_path, fake)
    monkeypatch.chdir(evil.parent)
    ref = find_run(evil.name)  # the same string as the folder in the current directory
    assert ref.run_dir == run_dir
    result = CliRunner().invoke(cli, ["kill", evil.name])
    assert fake.states["4242"] == "RUNNING", result.output
    assert all("4242" not in ids for ids in fake.cancels)
    assert invocation in result.output


def test_a_path_to_another_users_run_directory_is_refused_naming_its_owner(
        tmp_path: Path, fake: FakeSlurm) -> None:
    _, evil, _ = _plant(tmp_path, fake)
    for ref in (str(evil), str(evil) + "/"):
        with pytest.raises(RunNotFound, match=r"not a run directory of yours.*uid 65534"):
            find_run(ref)
    for command in ("kill", "info", "status"):
        result = CliRunner().invoke(cli, [command, str(evil)])
        assert result.exit_code != 0 and "uid 65534" in result.output, (command, result.output)
    assert fake.states["4242"] == "RUNNING"
    assert fake.cancels == []


def test_kill_refuses_a_run_directory_it_does_not_own(tmp_path: Path, fake: FakeSlurm) -> None:
    _, evil, _ = _plant(tmp_path, fake)
    with pytest.raises(PermissionError, match=r"not a directory of yours \(it is owned by "
                                              r"nobody \(uid 65534\), not by you\)"):
        kill_run(ref_from_dir(evil))
    assert fake.cancels == []
