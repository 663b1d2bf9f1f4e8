"""One submit resolves each task once: one catalogue load, one lookup per task name, one
build of each model's steps, whether the run is one model or a sweep."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.runs import write_run_file
from support.slurm import FakeSlurm

import hpceval.render.job
import hpceval.tasks
import hpceval.tasks.command
from hpceval import api
from hpceval.cli.main import cli
from hpceval.tasks import Catalogue


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()

    def count(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    count(hpceval.tasks, "load_catalogue")
    count(Catalogue, "resolve")
    count(Catalogue, "harness")
    count(hpceval.tasks.command, "render_command")
    count(hpceval.render.job, "build_steps")
    return counts


@pytest.mark.parametrize("models", [1, 3])
def test_one_resolution_per_submit(tmp_path: Path, fake: FakeSlurm, calls: Counter[str],
                                   models: int) -> None:
    run_file = write_run_file(tmp_path, models)  # two tasks: ut_one, ut_two
    result = api.submit(run_file, profile="local-dev", client=fake)
    assert len(result.models) == models and fake.submits
    assert calls["load_catalogue"] == 1
    assert calls["resolve"] == 2  # each task name once, shared by a sweep's models
    assert calls["harness"] == 2 * models and calls["render_command"] == 2 * models
    assert calls["build_steps"] == models  # once per model's job script


def test_one_resolution_per_cli_dry_run(tmp_path: Path, calls: Counter[str]) -> None:
    run_file = write_run_file(tmp_path, 2)
    result = CliRunner().invoke(cli, ["submit", "--dry-run", "--profile", "local-dev",
                                      str(run_file)])
    assert result.exit_code == 0, result.output
    assert (calls["load_catalogue"], calls["resolve"], calls["build_steps"]) == (1, 2, 2)
