"""A task's include_path gets hpceval.trust's rule (lm-eval imports what is in that folder, and
the Python its !function tags name, as the user): a folder another uid owns, one others can
write, or one holding another uid's file, is refused at submit with a ConfigError naming the
key path, the folder, its owner and the fix; nothing is written or queued."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from second_user import as_nobody, shared_scratch

from hpceval.cli.main import cli
from hpceval.config import ResolvedConfig, load_run
from hpceval.staging import preflight

NOBODY = 65534
KEY = "evaluation.tasks.lm-eval-upstream.my_task.params.extra.include_path"


def _task(folder: Path) -> str:
    return ("evaluation.tasks=[{name: lm-eval-upstream.my_task, allow_unlisted: true, "
            f"params: {{extra: {{include_path: '{folder}'}}}}}}]")


def _tasks_dir(base: Path) -> Path:
    folder = base / "lm_eval_tasks"
    folder.mkdir(mode=0o755)
    (folder / "my_task.yaml").write_text("task: my_task\n")
    (folder / "my_task.yaml").chmod(0o644)
    return folder


@pytest.fixture
def sbatch_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake sbatch first on PATH that only records that it was called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return calls


def test_a_task_folder_another_user_owns_is_refused_at_submit(
        tmp_path: Path, sbatch_calls: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a folder another user owns needs root")
    folder = _tasks_dir(tmp_path)
    os.chown(folder, NOBODY, NOBODY)
    out = tmp_path / "runs"
    result = CliRunner().invoke(cli, [
        "submit", "--profile", "local-dev", "-o", f"execution.output_dir={out}",
        "-o", _task(folder), "-o", "deployment.type=none",
        "-o", "target.api_endpoint.url=http://h/v1", "-o", "target.api_endpoint.model_id=m"])
    assert result.exit_code == 2, result.output
    assert (f"{KEY}: refusing task folder {folder}: it is owned by nobody (uid 65534), not by "
            "you or root") in result.stderr
    assert "copy the tasks into a folder of your own" in result.stderr
    assert not sbatch_calls.exists() and not out.exists()


def _issues(tmp_path: Path, folder: Path) -> list[str]:
    [resolved] = load_run(None, [
        f"execution.output_dir={tmp_path / 'runs'}", _task(folder), "deployment.type=none",
        "target.api_endpoint.url=http://h/v1", "target.api_endpoint.model_id=m"],
        profile="local-dev", check_environment=False)
    return [str(i) for i in preflight(resolved, environ={}) if i.path == KEY]


def test_a_folder_others_can_write_or_holding_another_users_file_is_refused(
        tmp_path: Path) -> None:
    folder = _tasks_dir(tmp_path)
    assert _issues(tmp_path, folder) == []  # the user's own, in a private folder
    folder.chmod(0o775)  # a group-writable project folder
    [issue] = _issues(tmp_path, folder)
    assert f"refusing task folder {folder}: it is writable by other users (mode 775)" in issue
    folder.chmod(0o755)
    (folder / "my_task.yaml").chmod(0o666)
    [issue] = _issues(tmp_path, folder)
    assert f"{folder / 'my_task.yaml'} in it: it is writable by other users (mode 666)" in issue
    (folder / "my_task.yaml").chmod(0o644)
    if os.geteuid() == 0:  # a file another uid planted (or owns) inside the user's folder
        (folder / "utils.py").write_text("import os\n")
        os.chown(folder / "utils.py", NOBODY, NOBODY)
        [issue] = _issues(tmp_path, folder)
        assert (f"{folder / 'utils.py'} in it: it is owned by nobody (uid 65534), not by you "
                "or root") in issue


def _resolved(tmp_path: Path, folder: str) -> ResolvedConfig:
    [resolved] = load_run(None, [
        f"execution.output_dir={tmp_path / 'runs'}", _task(Path(folder)), "deployment.type=none",
        "target.api_endpoint.url=http://h/v1", "target.api_endpoint.model_id=m"],
        profile="local-dev", check_environment=False)
    return resolved


def test_a_relative_include_path_means_the_submit_folder_and_gets_the_same_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a relative include_path was not checked at all (and lm-eval looked for it in
    the task's new folder of the run directory). Now it is the folder submit runs in, made
    absolute in the run, and checked like an absolute one: a folder another uid made in a
    shared 1777 folder the user submits from is refused, naming it and its owner."""
    monkeypatch.chdir(tmp_path)
    _tasks_dir(tmp_path)
    resolved = _resolved(tmp_path, "lm_eval_tasks")
    [task] = resolved.tasks
    assert task.params["extra"]["include_path"] == str(tmp_path / "lm_eval_tasks")
    assert f"--include_path {tmp_path / 'lm_eval_tasks'}" in task.command
    assert [i for i in preflight(resolved, environ={}) if i.path == KEY] == []
    with shared_scratch("hpceval-include-") as base:
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        as_nobody("mkdir", "-m", "755", str(shared / "tasks"))
        monkeypatch.chdir(shared)
        [issue] = _issues(tmp_path, Path("tasks"))
        assert (f"{KEY}: refusing task folder {shared / 'tasks'}: it is owned by nobody (uid "
                "65534), not by you or root") in issue


def test_an_include_path_left_relative_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What compose cannot make absolute ($VAR, which the job would not expand either; a
    user catalogue's relative one) names nothing preflight could check: refused."""
    [issue] = _issues(tmp_path, Path("$HOME/tasks"))
    assert issue.startswith(f"{KEY}: '$HOME/tasks' is not an absolute path")
    catalogue = tmp_path / "site.yaml"
    catalogue.write_text("harness: lm-eval-upstream\ntasks:\n  - name: rel_task\n"
                         "    endpoint_type: completions\n    description: d\n"
                         "    params: {extra: {include_path: lm_eval_tasks}}\n")
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(catalogue))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    [resolved] = load_run(None, [
        f"execution.output_dir={tmp_path / 'runs'}", "evaluation.tasks=[rel_task]",
        "deployment.type=none", "target.api_endpoint.url=http://h/v1",
        "target.api_endpoint.model_id=m"], profile="local-dev", check_environment=False)
    [issue] = [str(i) for i in preflight(resolved, environ={})
               if i.path.endswith(".params.extra.include_path")]
    assert "'lm_eval_tasks' is not an absolute path" in issue and "fix:" in issue
