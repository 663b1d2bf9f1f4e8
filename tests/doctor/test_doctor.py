"""hpceval doctor's decisions (issue 21, "hpceval doctor"): each check's ok / warning / problem
and its fix, from strict fakes (a Slurm client that records its calls, a fake sinfo, mount
tables, node-job facts). The job script itself runs here with bash (no Slurm); the real
dev-cluster job is tests/integration/test_doctor_node.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpceval.backends.slurm.client import SlurmError
from hpceval.backends.slurm.partitions import Partition, partition_info
from hpceval.backends.slurm.records import QueueEntry
from hpceval.cli.main import cli
from hpceval.config.schema import RunSpec
from hpceval.doctor import login, node
from hpceval.doctor.check import doctor, profile_spec
from hpceval.doctor.report import Line, Report, Status

SINFO = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/calls"
[ "$1 $2 $3" = "-h -o %P %l" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
table='gpu* 12:00:00
debug infinite'
# like Slurm: an unknown partition is no line and exit 0
if [ "${4:-}" = -p ]; then grep "^$5[* ]" <<< "$table" || true; else echo "$table"; fi
'''
NFS = "srv:/home /home nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n"


@pytest.fixture
def sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO)
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    partition_info.cache_clear()
    yield bin_dir / "calls"
    partition_info.cache_clear()


class FakeClient:
    """A strict SlurmClient with test_only: records every call, answers as told."""

    def __init__(self, *, refuse: str | None = None, facts: dict[str, Any] | None = None,
                 state: str = "COMPLETED") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refuse, self.facts, self.state = refuse, facts, state

    def test_only(self, script_path: Path, *, extra_args: Sequence[str] = ()) -> str:
        assert script_path.is_file(), "sbatch --test-only reads a script that exists"
        self.calls.append(("test_only", list(extra_args)))
        if self.refuse:
            raise SlurmError(["sbatch", "--test-only"], 1, self.refuse)
        return "sbatch: Job 7 to start at 2026-01-01T00:00:00 using 1 processors"

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None) -> str:
        self.calls.append(("submit", list(extra_args)))
        if self.facts is not None:  # "the job ran": its report where the script says
            report = script_path.parent / node.REPORT_FILE
            report.write_text(json.dumps({"version": 1, "facts": self.facts}))
        return "42"

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
        self.calls.append(("squeue", list(job_ids)))
        return {}

    def sacct(self, job_ids: Sequence[str], *, starttime: Any = None) -> dict[str, Any]:
        raise AssertionError("the doctor does not need sacct")

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.calls.append(("cancel", list(job_ids)))


def _spec(tmp_path: Path, **execution: Any) -> RunSpec:
    from hpceval.config.build import build_run_spec

    ex = {"partition": "gpu", "walltime": "01:00:00", "output_dir": str(tmp_path / "out"),
          **execution}
    return build_run_spec({"execution": ex, "deployment": {"type": "none"},
                           "evaluation": {"tasks": [{"name": "t"}]}})


def _by_check(lines: list[Line]) -> dict[str, Line]:
    return {line.check: line for line in lines}


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
    missing = _by_check(login.partition_lines(_spec(tmp_path, partition="nope").execution))
    assert missing["execution.partition"].status is Status.PROBLEM
    assert "sinfo -s" in missing["execution.partition"].fix
    too_long = _by_check(login.partition_lines(_spec(tmp_path, walltime="13:00:00",
                                                     max_walltime="13:00:00").execution))
    assert too_long["execution.partition"].status is Status.PROBLEM
    assert "execution.walltime=720 or less" in too_long["execution.partition"].fix
    fits = login.partition_lines(_spec(tmp_path, cpu_partition="debug").execution)
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
        [line] = login.partition_lines(_spec(tmp_path).execution)
    finally:
        partition_info.cache_clear()
    assert line.status is Status.WARNING and "sinfo could not be asked" in line.detail


def test_test_only_passes_account_and_qos_and_names_a_refusal(tmp_path: Path) -> None:
    ex = _spec(tmp_path, account="proj1", qos="high", reservation="maint").execution
    client = FakeClient()
    line = login.test_only_line(ex, client, tmp_path)
    assert line.status is Status.OK and "Job 7 to start" in line.detail
    assert client.calls == [("test_only", ["--partition=gpu", "--account=proj1", "--qos=high",
                                           "--reservation=maint", "--time=01:00:00",
                                           "--nodes=1"])]
    assert not (tmp_path / "test-only.sh").exists()  # its script is removed again
    refused = login.test_only_line(ex, FakeClient(
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
    spec = _spec(tmp_path, output_dir=str(blocker / "runs"))
    client = FakeClient()
    report = doctor(spec, client=client, on_node=True, mounts=NFS)
    lines = _by_check(report.lines)
    assert lines["output dir"].status is Status.PROBLEM and report.exit_code == 1
    assert lines["sbatch --test-only"].status is Status.WARNING
    assert client.calls == []  # no test-only, no node job without a folder for them


# -- the node job: script, waiting, decisions ---------------------------------------------------

def _facts(**changes: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "node": {"rc": 0, "out": "node1 x86_64"}, "hpceval": {"rc": 0, "out": "0.1.0 x86_64"},
        "apptainer": {"rc": 0, "out": "apptainer version 1.3.4"},
        "singularity": {"rc": 127, "out": "not on PATH"},
        "enroot": {"rc": 127, "out": "not on PATH"}, "podman": {"rc": 127, "out": "not on PATH"},
        "gpus": {"rc": 127, "out": "nvidia-smi not on PATH"},
        "route": {"rc": 0, "out": "default via 10.0.0.1 dev eth0"},
        "listening": {"rc": 0, "out": "22 8000 8001"},
        "port_range": {"rc": 0, "out": "32768 60999"}}
    facts.update(changes)
    return facts


def test_node_lines_from_a_healthy_cpu_node(tmp_path: Path) -> None:
    spec = _spec(tmp_path, container_runtime="apptainer")
    lines = node.node_lines(spec, _facts(), "/sw/py", None)
    statuses = {line.check: line.status for line in lines}
    assert statuses["GPUs"] is Status.WARNING  # a CPU job sees none: a warning, not a problem
    assert Report(lines).exit_code == 0
    assert _by_check(lines)["free ports"].detail.startswith("24766 of 24768 ports free")
    assert _by_check(lines)["outbound network"].detail.startswith("not tried")


def test_node_problems_name_the_fix(tmp_path: Path) -> None:
    spec = _spec(tmp_path, container_runtime="apptainer", modules=["cuda/12"])
    facts = _facts(hpceval={"rc": 1, "out": "Traceback\nModuleNotFoundError: No module named "
                                           "'hpceval'"},
                   apptainer={"rc": 127, "out": "not on PATH"},
                   **{"module:cuda/12": {"rc": 1, "out": "Lmod has detected the following "
                                                        "error: cuda/12 unknown"}})
    lines = _by_check(node.node_lines(spec, facts, "/login/venv/bin/python", None))
    assert lines["hpceval importable"].status is Status.PROBLEM
    assert "HPCEVAL_PYTHON=/login/venv/bin/python cannot import hpceval on node1" in \
        lines["hpceval importable"].detail
    assert "execution.python" in lines["hpceval importable"].fix
    assert lines["module load cuda/12"].status is Status.PROBLEM
    assert "cuda/12 unknown" in lines["module load cuda/12"].detail
    assert lines["apptainer"].status is Status.PROBLEM  # the runtime the profile needs
    assert lines["enroot"].status is Status.OK  # absent but not needed


def test_network_route_and_ports_decisions(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    target = node.NetTarget("127.0.0.1", 3128, "--network-target")
    facts = _facts(network={"rc": 1, "out": "connect: Connection refused"},
                   proxy_vars={"rc": 0, "out": ""}, route={"rc": 0, "out": ""},
                   port_range={"rc": 0, "out": "1024 65535"})
    lines = _by_check(node.node_lines(spec, facts, "/sw/py", target))
    assert lines["outbound network"].status is Status.PROBLEM
    assert "https_proxy" in lines["outbound network"].fix
    assert lines["default route"].status is Status.WARNING
    assert "VLLM_HOST_IP" in lines["default route"].fix
    assert lines["free ports"].status is Status.WARNING and "1024" in lines["free ports"].detail
    taken = " ".join(str(p) for p in range(8000, 32768))
    full = _by_check(node.node_lines(spec, _facts(listening={"rc": 0, "out": taken}),
                                     "/sw/py", None))
    assert full["free ports"].status is Status.PROBLEM


def test_network_target_comes_from_the_option_the_proxy_or_an_external_url(
        tmp_path: Path) -> None:
    from hpceval.config.build import build_run_spec

    spec = _spec(tmp_path)
    assert node.network_target([spec], None, {}) is None  # nothing named: nothing tried
    assert node.network_target([spec], "127.0.0.1:9", {"https_proxy": "http://p:3128"}) == \
        node.NetTarget("127.0.0.1", 9, "--network-target")
    assert node.network_target([spec], None, {"https_proxy": "http://u:pw@proxy:3128"}) == \
        node.NetTarget("proxy", 3128, "$https_proxy")
    external = build_run_spec({"execution": {"output_dir": "/o"}, "deployment": {"type": "none"},
                               "target": {"api_endpoint": {"url": "https://api.example/v1",
                                                           "model_id": "m"}},
                               "evaluation": {"tasks": [{"name": "t"}]}})
    assert node.network_target([external], None, {}) == \
        node.NetTarget("api.example", 443, "target.api_endpoint.url")


def test_the_job_script_quotes_every_value_and_runs(tmp_path: Path) -> None:
    odd = tmp_path / "it's $(touch pwned) `x`"
    odd.mkdir()
    spec = _spec(tmp_path, hf_cache_dir=str(odd), modules=["a b; touch pwned2"])
    script = node.job_script(spec.execution, sys.executable, odd / node.REPORT_FILE,
                             node.NetTarget("127.0.0.1", 1, "test"))
    path = tmp_path / "job.sh"
    path.write_text(script)
    if shutil.which("shellcheck"):
        check = subprocess.run(["shellcheck", "-s", "bash", "-S", "warning", str(path)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    facts = json.loads((odd / node.REPORT_FILE).read_text())["facts"]
    assert facts["hpceval"]["rc"] == 0  # this Python imports hpceval
    assert facts["hf_cache"]["rc"] == 0 and facts["network"]["rc"] != 0  # port 1: refused
    assert "module:a b; touch pwned2" in facts  # one module name, never split or run


def _shell_function(script: str, name: str) -> str:
    start = script.index(f"{name}() {{")
    return script[start:script.index("\n}\n", start) + 3]


def test_the_job_script_counts_listening_ports_as_a_model_job_does(tmp_path: Path) -> None:
    """Whether a port is free is the job preamble's rule: the doctor runs the same function,
    not a copy that could drift from it."""
    ex = _spec(tmp_path).execution
    script = node.job_script(ex, sys.executable, tmp_path / node.REPORT_FILE, None)
    job = (Path(__file__).parents[1] / "golden" / "slurm__single-tp.sbatch").read_text()
    assert _shell_function(script, "listening_ports") == _shell_function(job, "listening_ports")


def test_a_job_that_ends_without_a_report_or_never_reports(tmp_path: Path) -> None:
    ex = _spec(tmp_path).execution
    client = FakeClient()  # squeue forgets the job: it ended, and wrote nothing
    job, facts, line = node.run_node_job(client, ex, tmp_path, "#!/bin/bash\n", timeout_s=30,
                                         sleep=lambda s: None)
    assert job == "42" and facts is None and line is not None
    assert line.status is Status.PROBLEM and "without a report" in line.detail
    submit = client.calls[0]
    assert submit[0] == "submit" and "--time=00:05:00" in submit[1] and \
        "--partition=gpu" in submit[1]

    class Pending(FakeClient):
        def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
            return {"42": QueueEntry("42", "PENDING", "Resources", "")}

    clock = iter(range(0, 1000, 10))
    waiting = Pending()
    _, _, line = node.run_node_job(waiting, ex, tmp_path, "#!/bin/bash\n", timeout_s=30,
                                   sleep=lambda s: None, clock=lambda: float(next(clock)))
    assert line is not None and "no report within 30 s (PENDING)" in line.detail
    assert ("cancel", ["42"]) in waiting.calls  # a job that never ran is not left queued


def test_doctor_on_node_end_to_end_with_a_fake_client(tmp_path: Path, sinfo: Path) -> None:
    # a Python on NFS (in NFS's table), not this test's own: a checkout in /tmp would add its
    # venv, rightly node-local, to the problems
    spec = _spec(tmp_path, python="/home/u/venv/bin/python3")
    client = FakeClient(facts=_facts())
    report = doctor(spec, client=client, on_node=True, mounts=NFS, environ={})
    assert report.job_id == "42"
    assert [line.where for line in report.lines].count("node") >= 8
    # the only problem: pytest's output dir is in /tmp, node-local on a real cluster
    assert [line.check for line in report.lines if line.status is Status.PROBLEM] == \
        ["output dir"] and report.exit_code == 1
    assert report.job_dir is not None  # kept on a problem: its script, log and report
    assert (Path(report.job_dir) / node.SCRIPT_FILE).is_file()


def test_a_healthy_site_exits_0_and_leaves_nothing_behind(tmp_path: Path, sinfo: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login, "NODE_LOCAL_DIRS", ())  # pytest's tmp_path stands for NFS here
    mounts = f"/dev/sda1 / ext4 rw 0 0\nsrv:/x {tmp_path} nfs4 rw 0 0\n"
    spec = _spec(tmp_path, python=str(tmp_path / "venv" / "bin" / "python"))
    report = doctor(spec, client=FakeClient(facts=_facts()), on_node=True, mounts=mounts,
                    environ={})
    assert report.exit_code == 0, report.table()  # GPUs absent in a CPU job: a warning only
    assert report.status is Status.WARNING
    assert report.job_dir is None and not list((tmp_path / "out").iterdir())


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
    result = api_doctor(profile="local-dev", overrides=[f"execution.output_dir={tmp_path}/o"],
                        client=client)
    checks = {line["check"]: line["status"] for line in result["lines"]}
    assert checks["execution.partition"] == "ok"  # the fake sinfo's debug: infinite
    assert checks["sbatch --test-only"] == "ok" and client.calls[0][1][0] == "--partition=debug"
    assert checks["output dir"] == "problem" and result["exit_code"] == 1  # /tmp: node-local


def test_an_unreadable_report_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    class Garbled(FakeClient):
        def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
                   dependency: str | None = None) -> str:
            (script_path.parent / node.REPORT_FILE).write_bytes(b'{"facts": {"node": \xff')
            return "43"

    _, facts, line = node.run_node_job(Garbled(), _spec(tmp_path).execution, tmp_path,
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
    line = _by_check(report.lines)["deployment.checkpoint_path"]
    assert line.status is Status.PROBLEM and "is not a directory here" in line.detail
    assert "shared storage" in line.fix and report.exit_code == 1
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    fixed = doctor(configs[0].spec, configs, client=FakeClient(), mounts=NFS, environ={})
    assert "deployment.checkpoint_path" not in _by_check(fixed.lines)


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
    line = _by_check(report.lines)["deployment.image"]
    assert line.status is Status.WARNING and "pulled and converted at run time" in line.detail
    assert f"hpceval stage {run}" in line.fix
    (image_dir / "vllm_vllm-openai_v0.32.0.sif").write_bytes(b"staged")
    staged = doctor(configs[0].spec, load_run(run, check_environment=False),
                    client=FakeClient(), mounts=NFS, environ={})
    assert "deployment.image" not in _by_check(staged.lines)
