"""hpceval doctor's decisions (issue 21, "hpceval doctor") on the login node and as a command:
each check's ok / warning / problem and its fix, from strict fakes (a Slurm client that records
its calls, a fake sinfo, mount tables). The node job's script and decisions are
test_node_job.py; the real dev-cluster job is tests/integration/test_doctor_node.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from doctor_helpers import NFS, FakeClient, by_check, spec_for

from hpceval.backends.slurm.partitions import Partition, partition_info
from hpceval.cli.main import cli
from hpceval.doctor import login, node
from hpceval.doctor.check import doctor, profile_spec
from hpceval.doctor.report import Line, Report, Status

# -- the table and the exit status -------------------------------------------------------------

def test_warnings_alone_exit_0_and_any_problem_exits_1() -> None:
    ok = Line("login", "a", Status.OK, "fine")
    warn = Line("node", "b", Status.WARNING, "hm", "do x")
    bad = Line("node", "c", Status.PROBLEM, "broken", "do y")
    assert Report([ok, warn]).exit_code == 0 and Report([ok, warn]).status is Status.WARNING
    assert Report([ok, warn, bad]).exit_code == 1
    table = Report([ok, bad]).table()
    assert "fix: do y" in table and "1 ok, 0 warning(s), 1 problem(s)" in table
    assert Report([ok, bad]).to_json()["lines"][1]["status"] == "problem"


# -- login node: partition, sbatch --test-only, shared storage ---------------------------------

def test_partition_found_missing_and_walltime_over_max_time(sinfo: Path, tmp_path: Path) -> None:
    assert partition_info("nope") == Partition("nope", False, None)  # sinfo: no line
    missing = by_check(login.partition_lines(spec_for(tmp_path, partition="nope").execution))
    assert missing["execution.partition"].status is Status.PROBLEM
    assert "sinfo -s" in missing["execution.partition"].fix
    too_long = by_check(login.partition_lines(spec_for(tmp_path, walltime="13:00:00",
                                                     max_walltime="13:00:00").execution))
    assert too_long["execution.partition"].status is Status.PROBLEM
    assert "execution.walltime=720 or less" in too_long["execution.partition"].fix
    fits = login.partition_lines(spec_for(tmp_path, cpu_partition="debug").execution)
    assert [(line.check, line.status) for line in fits] == [
        ("execution.partition", Status.OK), ("execution.cpu_partition", Status.OK)]
    assert "MaxTime unlimited" in fits[1].detail
    # the cached sinfo call: each partition asked once, whatever the number of checks
    assert sorted(sinfo.read_text().splitlines()) == [
        "-h -o %P %l -p debug", "-h -o %P %l -p gpu", "-h -o %P %l -p nope"]


def test_no_sinfo_is_a_warning_not_a_problem(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    partition_info.cache_clear()
    try:
        [line] = login.partition_lines(spec_for(tmp_path).execution)
    finally:
        partition_info.cache_clear()
    assert line.status is Status.WARNING and "sinfo could not be asked" in line.detail


def test_test_only_asks_about_the_jobs_own_header_and_names_a_refusal(tmp_path: Path) -> None:
    # hpc-admin-2 N5: a trivial script with the partition, account and QOS was "ok" where the
    # job's real header (its GPU, CPU and memory request) is refused
    spec = spec_for(tmp_path, account="proj1", qos="high", reservation="maint",
                    gpus_per_node=4, gpu_type="h100", gpu_request="gres", mem_per_gpu="64G")
    client = FakeClient()
    line = login.test_only_line(spec, client, tmp_path)
    assert line.status is Status.OK and "Job 7 to start" in line.detail
    assert client.calls == [("test_only", [])]  # everything is in the script, as in a job's
    header = [row.split("#")[1].strip().removeprefix("SBATCH ")
              for row in client.test_only_script.splitlines() if row.startswith("#SBATCH")]
    for flag in ("--partition=gpu", "--account=proj1", "--qos=high", "--reservation=maint",
                 "--time=01:00:00", "--nodes=1", "--gres=gpu:h100:4", "--mem-per-gpu=64G"):
        assert flag in header, (flag, header)
        assert flag in line.detail
    assert not (tmp_path / "test-only.sh").exists()  # its script is removed again
    refused = login.test_only_line(spec, FakeClient(
        refuse="sbatch: error: Invalid qos specification"), tmp_path)
    assert refused.status is Status.PROBLEM and "Invalid qos specification" in refused.detail
    assert "execution.qos" in refused.fix


@pytest.mark.parametrize(("path", "status", "fstype"), [
    ("/home/u/runs", Status.OK, "nfs4"),
    ("/tmp/runs", Status.PROBLEM, "tmpfs"),
    ("/var/tmp/runs", Status.PROBLEM, "ext4"),  # node-local by its place, whatever its type
    ("/opt/runs", Status.WARNING, "ext4"),
    ("/home/u/my dir/x", Status.PROBLEM, "tmpfs"),  # the longest mount point wins, \040 read
])
def test_shared_storage_by_the_mount_table(path: str, status: Status, fstype: str) -> None:
    mounts = NFS + "none /home/u/my\\040dir tmpfs rw 0 0\n"
    line = login.shared_storage_line("output dir", "execution.output_dir", path, mounts)
    assert line.status is status and fstype in line.detail
    if status is not Status.OK:
        assert "execution.output_dir" in line.fix


def test_hpceval_python_is_judged_by_its_venv_folder_not_the_base_interpreter(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to("/usr/bin/python3")  # what a venv's python is
    # the base interpreter is on NFS, the venv (with hpceval in it) in node-local /tmp
    mounts = "/dev/sda1 / ext4 rw 0 0\nsrv:/usr /usr nfs rw 0 0\n"
    line = login.python_line(str(venv / "python"), mounts)
    assert line.status is Status.PROBLEM and line.check == "HPCEVAL_PYTHON"
    assert "execution.python" in line.fix


def test_an_unwritable_output_dir_is_a_problem_and_asks_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    spec = spec_for(tmp_path, output_dir=str(blocker / "runs"))
    client = FakeClient()
    report = doctor(spec, client=client, on_node=True, mounts=NFS)
    lines = by_check(report.lines)
    assert lines["output dir"].status is Status.PROBLEM and report.exit_code == 1
    assert lines["sbatch --test-only"].status is Status.WARNING
    assert client.calls == []  # no test-only, no node job without a folder for them


def test_a_missing_output_dir_is_reported_never_created(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # hpc-admin-2 N11: doctor made /lustre/scratch/alice/hpceval on the login node's root disk
    # and called it writable
    monkeypatch.setattr(login, "NODE_LOCAL_DIRS", ())  # pytest's folder stands for shared storage
    spec = spec_for(tmp_path, output_dir=str(tmp_path / "scratch" / "alice" / "runs"))
    client = FakeClient()
    shared = f"/dev/sda1 / ext4 rw 0 0\nsrv:/scratch {tmp_path} nfs4 rw 0 0\n"
    report = doctor(spec, client=client, on_node=True, mounts=shared)
    lines = by_check(report.lines)
    assert not (tmp_path / "scratch").exists()
    line = lines["output dir"]
    assert line.status is Status.WARNING and "does not exist" in line.detail
    assert str(tmp_path) in line.detail  # where submit would make it, and what storage that is
    assert "mkdir -p" in line.fix
    assert lines["doctor job"].status is Status.WARNING and "not run" in lines["doctor job"].detail
    assert client.calls == []
    local = by_check(doctor(spec, client=client, mounts="/dev/sda1 / ext4 rw 0 0\n"
                            f"none {tmp_path} tmpfs rw 0 0\n").lines)
    assert local["output dir"].status is Status.PROBLEM  # it would be made on node-local disk
    monkeypatch.undo()  # /tmp is node-local again: a folder to be made in it is a problem too
    in_tmp = spec_for(tmp_path, output_dir="/tmp/hpceval-doctor-never-made/runs")
    line = by_check(doctor(in_tmp, client=client, mounts="/dev/sda1 / ext4 rw 0 0\n").lines)[
        "output dir"]
    assert line.status is Status.PROBLEM and "is node-local" in line.detail, line
    assert not Path("/tmp/hpceval-doctor-never-made").exists()


# -- the command --------------------------------------------------------------------------------

def test_a_bare_profile_is_checked_without_a_run(tmp_path: Path) -> None:
    spec = profile_spec("local-dev", [f"execution.output_dir={tmp_path}"])
    assert spec.execution.partition == "debug" and spec.execution.output_dir == str(tmp_path)


def test_cli_lists_doctor_and_checks_its_options() -> None:
    runner = CliRunner()
    assert "  doctor " in runner.invoke(cli, ["--help"]).output
    help_text = runner.invoke(cli, ["doctor", "--help"]).output
    assert "--on-node" in help_text and "--json" in help_text
    bad = runner.invoke(cli, ["doctor", "local-dev", "--network-target", "nohost"])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.output


def test_api_doctor_of_a_profile(tmp_path: Path, sinfo: Path) -> None:
    from hpceval.api import doctor as api_doctor

    client = FakeClient()
    result = api_doctor(profile="local-dev", overrides=[f"execution.output_dir={tmp_path}"],
                        client=client)
    checks = {line["check"]: line["status"] for line in result["lines"]}
    assert checks["execution.partition"] == "ok"  # the fake sinfo's debug: infinite
    assert checks["sbatch --test-only"] == "ok"
    assert "#SBATCH --partition=debug" in client.test_only_script  # the profile's job header
    assert checks["output dir"] == "problem" and result["exit_code"] == 1  # /tmp: node-local


def test_an_unreadable_report_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    class Garbled(FakeClient):
        def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
                   dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
            (script_path.parent / node.REPORT_FILE).write_bytes(b'{"facts": {"node": \xff')
            return "43"

    _, facts, line = node.run_node_job(Garbled(), spec_for(tmp_path).execution, tmp_path,
                                       "#!/bin/bash\n", timeout_s=30, sleep=lambda s: None)
    assert facts is None and line is not None and "unreadable report" in line.detail


def test_a_run_file_adds_the_submit_preflight_as_lines(tmp_path: Path, sinfo: Path) -> None:
    import yaml

    from hpceval.config import load_run

    checkpoint = tmp_path / "ckpt"  # absent: submit would refuse the run
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "defaults": [{"execution": "local-dev"}],
        "execution": {"output_dir": str(tmp_path / "out"), "gpus_per_node": 1},
        "deployment": {"type": "vllm", "runtime": "host", "served_model_name": "m",
                       "checkpoint_path": str(checkpoint)},
        "evaluation": {"tasks": [{"name": "lm-eval-upstream.gsm8k"}]}}))
    configs = load_run(run, check_environment=False)
    report = doctor(configs[0].spec, configs, client=FakeClient(), mounts=NFS, environ={})
    line = by_check(report.lines)["deployment.checkpoint_path"]
    assert line.status is Status.PROBLEM and "is not a directory here" in line.detail
    assert "shared storage" in line.fix and report.exit_code == 1
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    fixed = doctor(configs[0].spec, configs, client=FakeClient(), mounts=NFS, environ={})
    assert "deployment.checkpoint_path" not in by_check(fixed.lines)


def test_a_server_image_pulled_at_run_time_is_a_warning(tmp_path: Path, sinfo: Path) -> None:
    """Issue 21, defect 4: online nodes pull an unstaged docker:// server image in every job;
    the doctor says so (a warning: it works), with the stage command; staged, it is gone."""
    import yaml

    from hpceval.config import load_run

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    image_dir = tmp_path / "sif"
    image_dir.mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "defaults": [{"execution": "slurm"}],
        "execution": {"output_dir": str(tmp_path / "out"), "gpus_per_node": 1,
                      "image_dir": str(image_dir), "offline": False},
        "deployment": {"type": "vllm", "image": "docker://vllm/vllm-openai:v0.32.0",
                       "served_model_name": "m", "checkpoint_path": str(checkpoint)},
        "evaluation": {"tasks": [{"name": "lm-eval-upstream.gsm8k",
                                  "params": {"extra": {"tokenizer": str(checkpoint)}}}]}}))
    configs = load_run(run, check_environment=False)
    report = doctor(configs[0].spec, configs, client=FakeClient(), mounts=NFS, environ={})
    line = by_check(report.lines)["deployment.image"]
    assert line.status is Status.WARNING and "pulled and converted at run time" in line.detail
    assert f"hpceval stage {run}" in line.fix
    (image_dir / "vllm_vllm-openai_v0.32.0.sif").write_bytes(b"staged")
    staged = doctor(configs[0].spec, load_run(run, check_environment=False),
                    client=FakeClient(), mounts=NFS, environ={})
    assert "deployment.image" not in by_check(staged.lines)
