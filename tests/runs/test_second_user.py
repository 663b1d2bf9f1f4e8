"""Two users, one output directory, tried for real: a second uid (`runuser -u nobody`) runs the
hpceval CLI against runs of this (root) user. A refused submit must fail before sbatch (exit 2),
never half-succeed; resume of another user's run fails cleanly; a setgid group directory lets
both submit; files get execution.umask's modes (default: group-readable, not world-readable)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import FAKES
from support.runs import ASK_HARNESS, CATALOGUE, configs, finish_task
from support.slurm import FakeSlurm

from hpceval.runs.index import list_runs
from hpceval.runs.registry import registry_path
from hpceval.runs.submit import submit_configs

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
NOGROUP = 65534
RUNUSER = shutil.which("runuser") or "runuser"


def _python_for(user: str, env: dict[str, str]) -> str | None:
    """The venv's Python if `user` can run it, else a system Python of the same version that
    imports the venv's packages through PYTHONPATH (same minor version: same ABI)."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        probe = subprocess.run([RUNUSER, "-u", user, "--", candidate, "-c",
                                "import hpceval.cli.main, aiohttp, yaml, filelock"],
                               env=env, capture_output=True, timeout=60)
        if probe.returncode == 0:
            return candidate
    return None


class SecondUser:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.sbatch_log = base / "sbatch.log"
        for path in (self.sbatch_log, base / "sbatch.log.lock"):  # the fake's log and lock
            path.touch()
            path.chmod(0o666)
        home = base / "home-nobody"
        home.mkdir()
        os.chown(home, NOBODY, NOGROUP)
        venv_site = [str(p) for p in sys.path if p.endswith("site-packages")]
        self.env = {
            "PATH": f"{FAKES / 'recording_sbatch'}:/usr/bin:/bin",
            "PYTHONPATH": os.pathsep.join([str(ROOT), *venv_site]),
            "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
            "HPCEVAL_CACHE_DIR": str(home / "hpceval-cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "HPCEVAL_TASKS_PATH": os.pathsep.join([str(base / "catalogue"), str(ASK_HARNESS)]),
            "FAKE_SBATCH_LOG": str(self.sbatch_log), "LANG": "C.UTF-8"}
        python = _python_for("nobody", self.env)
        if python is None:
            pytest.skip("user nobody cannot run a Python that imports hpceval here")
        self.python = python

    def hpceval(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RUNUSER, "-u", "nobody", "--", self.python, "-m",
                               "hpceval.cli.main", *args], env=self.env, cwd=self.base,
                              capture_output=True, text=True, timeout=120)

    def sbatch_calls(self) -> list[str]:
        return self.sbatch_log.read_text().splitlines()


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[SecondUser]:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as a second uid")
    # Not under pytest's tmp_path: that is private to root (0700); nobody must read the tree.
    base = Path(tempfile.mkdtemp(prefix="hpceval-2users-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "catalogue").mkdir()
        (base / "catalogue" / "ut.yaml").write_text(CATALOGUE)
        monkeypatch.setenv("HPCEVAL_TASKS_PATH", os.pathsep.join([str(base / "catalogue"),
                                                                 str(ASK_HARNESS)]))
        yield SecondUser(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_file(base: Path, out: Path, name: str) -> Path:
    path = base / f"{name}.yaml"
    path.write_text(json.dumps({
        "execution": {"gpus_per_node": 0, "output_dir": str(out)},
        "deployment": {"type": "command", "runtime": "host", "served_model_name": "solo",
                       "command": "exec my-server --port $PORT"},
        "evaluation": {"tasks": [{"name": "ut_one"}]}}))
    path.chmod(0o644)
    return path


def test_second_users_submit_into_an_output_dir_it_cannot_register_in_fails_before_sbatch(
        shared: SecondUser, fake: FakeSlurm) -> None:
    out = shared.base / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)  # run directories could be written; the registry folder is root's
    mine = submit_configs(configs(shared.base / "root", execution={"output_dir": str(out)}),
                          fake)
    assert stat.S_IMODE((out / ".hpceval").stat().st_mode) == 0o750
    result = shared.hpceval("submit", str(_run_file(shared.base, out, "theirs")), "--profile",
                            "local-dev")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "not writable by you" in result.stderr and ".hpceval" in result.stderr
    assert "Traceback" not in result.stderr
    assert shared.sbatch_calls() == []  # no job without a registry entry
    assert sorted(p.name for p in out.iterdir()) == [".hpceval", mine.run_dir.name]
    # resume of root's runs, by directory: refused cleanly, nothing written or submitted (a
    # readable one already at look-up: a path must be a run directory of the caller's own)
    readable = submit_configs(configs(shared.base / "root2", execution={
        "output_dir": str(out), "umask": "0022"}), fake)
    for run, message in ((mine, "permission denied"),
                         (readable, "is not a run directory of yours (its directory is owned "
                                    "by root (uid 0), not by you)")):
        fake.states[run.job_ids[0]] = "TIMEOUT"
        result = shared.hpceval("resume", str(run.run_dir))
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and shared.sbatch_calls() == []
    assert not (readable.run_dir / ".resume.lock").exists()
    # root's runs are not nobody's: not listed, not found by id
    result = shared.hpceval("status", "--json", mine.invocation_id)
    assert result.returncode != 0 and "no run" in result.stderr
    result = shared.hpceval("results", "--output-dir", str(out), "--format", "csv")
    assert result.returncode == 0 and mine.invocation_id not in result.stdout


def test_a_setgid_group_directory_lets_two_users_submit_each_seeing_only_their_runs(
        shared: SecondUser, fake: FakeSlurm) -> None:
    out = shared.base / "group-out"
    out.mkdir()
    os.chown(out, 0, NOGROUP)
    out.chmod(0o2770)  # a project directory: setgid, the group may write
    shared.base.chmod(0o755)
    mine = submit_configs(configs(shared.base / "root", execution={"output_dir": str(out)}),
                          fake)
    folder = out / ".hpceval"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o2770 and folder.stat().st_gid == NOGROUP
    assert stat.S_IMODE(registry_path(out).stat().st_mode) == 0o660
    result = shared.hpceval("submit", str(_run_file(shared.base, out, "theirs")), "--profile",
                            "local-dev")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert len(shared.sbatch_calls()) == 1
    entries = [json.loads(line) for line in registry_path(out).read_text().splitlines()]
    assert len(entries) == 2
    theirs = Path(next(e["run_dir"] for e in entries if e["run_dir"] != str(mine.run_dir)))
    assert theirs.stat().st_uid == NOBODY
    assert stat.S_IMODE((theirs / "run.json").stat().st_mode) == 0o640
    assert [r.run_dir for r in list_runs([out])] == [mine.run_dir]  # root sees root's run
    result = shared.hpceval("ls", "runs", "--output-dir", str(out))
    assert theirs.name in result.stdout and mine.invocation_id not in result.stdout, \
        (result.stdout, result.stderr)


def test_files_get_execution_umask_modes(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.job.cache import ResponseCache
    from hpceval.runs.rundir import run_umask

    old = os.umask(0o022)  # a typical login shell: would make everything world-readable
    try:
        run = submit_configs(configs(tmp_path), fake).run_dir
        with run_umask("0027"):  # what the job inherits (SLURM_UMASK / the local runner)
            finish_task(run, "solo", "ut-harness.ut_one")
            cache = ResponseCache(run / "models" / "solo" / "cache")
            cache.put(b"k" * 32, "/v1/completions", 200, b'{"choices":[1]}')
            cache.close()
        wide = submit_configs(configs(tmp_path / "wide", execution={"umask": "0022"}),
                              fake).run_dir
    finally:
        os.umask(old)

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    task = run / "models" / "solo" / "tasks" / "ut-harness.ut_one"
    assert mode(run) == 0o750 and mode(run / "job.sbatch") == 0o750
    assert mode(run / "run.json") == mode(run / "run.yaml") == mode(run / "jobs.json") == 0o640
    assert mode(registry_path(run.parent)) == 0o640 and mode(registry_path(run.parent).parent) \
        == 0o750
    assert mode(task / "results.json") == mode(task / "done") == 0o640
    assert {mode(p) for p in (run / "models" / "solo" / "cache").iterdir()} == {0o640}
    assert mode(wide / "run.json") == 0o644 and mode(wide / "job.sbatch") == 0o755
    assert json.loads((run / "run.json").read_text())["umask"] == "0027"


@pytest.mark.parametrize(("asked", "acts_as"), [("0007", 0o027), ("0002", 0o022)])
def test_a_group_writable_umask_leaves_nothing_of_a_run_writable_by_the_group(
        tmp_path: Path, fake: FakeSlurm, asked: str, acts_as: int) -> None:
    """shared-cluster-4 N4: with umask 0007 a member of the group replaced a queued sweep
    element's job.sh (it ran as the submitter) and planted the server image in <run>/images/.
    The run's folders and scripts, and what its jobs write (they inherit the umask), are
    writable by their owner only; the group still reads them; the submit says so."""
    from hpceval.runs.rundir import run_umask

    old = os.umask(0o022)
    try:
        run = submit_configs(configs(tmp_path, execution={"umask": asked}), fake).run_dir
        with run_umask(asked):  # what a job of the run gets (SLURM_UMASK / the local runner)
            assert os.umask(0o077) == acts_as
            os.umask(acts_as)
            finish_task(run, "solo", "ut-harness.ut_one")
            (run / "images").mkdir()
    finally:
        os.umask(old)
    group_write = stat.S_IWGRP | stat.S_IWOTH
    written = [p for p in [run, *run.rglob("*")] if p.stat().st_mode & group_write]
    assert written == []
    assert stat.S_IMODE(run.stat().st_mode) & stat.S_IRGRP  # the group still reads it
    (resolved,) = configs(tmp_path / "again", execution={"umask": asked})
    assert any(f"execution.umask {asked} acts as {acts_as:04o}" in note
               for note in resolved.composed.notes), resolved.composed.notes


def test_concurrent_submits_restore_the_umask_they_found(tmp_path: Path, fake: FakeSlurm
                                                          ) -> None:
    import threading

    old = os.umask(0o022)
    try:
        runs = configs(tmp_path)
        threads = [threading.Thread(target=submit_configs, args=(runs, fake))
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert os.umask(0o022) == 0o022  # not one of the submits' 0027
    finally:
        os.umask(old)
    assert len(fake.submits) == 8


@pytest.mark.parametrize("bad", ["0777", 27, "027"])
def test_an_unknown_umask_is_a_config_error_naming_the_key(tmp_path: Path, bad: object) -> None:
    from hpceval.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"execution\.umask") as exc:
        configs(tmp_path, execution={"umask": bad})
    assert exc.value.exit_code == 2
