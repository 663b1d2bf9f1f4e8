"""hpceval doctor's node job (issue 21): its script, run here with bash (no Slurm), waiting for
its report, and the decisions drawn from the facts it reports. The real dev-cluster job is
tests/integration/test_doctor_node.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from doctor_helpers import NFS, FakeClient, address_facts, by_check, node_facts, spec_for

from hpceval.backends.slurm.records import QueueEntry
from hpceval.doctor import login, node
from hpceval.doctor.check import doctor
from hpceval.doctor.report import Report, Status

# -- the node job: script, waiting, decisions ---------------------------------------------------



def test_node_lines_from_a_healthy_cpu_node(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, container_runtime="apptainer", gpus_per_node=0)
    lines = node.node_lines(spec, node_facts(), "/sw/py", None)
    statuses = {line.check: line.status for line in lines}
    assert statuses["GPUs"] is Status.OK  # a profile without GPUs: none asked, none to see
    assert Report(lines).exit_code == 0
    assert by_check(lines)["free ports"].detail.startswith("24766 of 24768 ports free")
    assert by_check(lines)["outbound network"].detail.startswith("not tried")


def test_node_problems_name_the_fix(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, container_runtime="apptainer", modules=["cuda/12"])
    facts = node_facts(hpceval={"rc": 1, "out": "Traceback\nModuleNotFoundError: No module named "
                                           "'hpceval'"},
                   apptainer={"rc": 127, "out": "not on PATH"},
                   **{"module:cuda/12": {"rc": 1, "out": "Lmod has detected the following "
                                                        "error: cuda/12 unknown"}})
    lines = by_check(node.node_lines(spec, facts, "/login/venv/bin/python", None))
    assert lines["hpceval importable"].status is Status.PROBLEM
    assert "HPCEVAL_PYTHON=/login/venv/bin/python cannot import hpceval on node1" in \
        lines["hpceval importable"].detail
    assert "execution.python" in lines["hpceval importable"].fix
    assert lines["module load cuda/12"].status is Status.PROBLEM
    assert "cuda/12 unknown" in lines["module load cuda/12"].detail
    assert lines["apptainer"].status is Status.PROBLEM  # the runtime the profile needs
    assert lines["enroot"].status is Status.OK  # absent but not needed


def test_the_program_that_runs_containers_on_the_node_is_the_one_checked(
        tmp_path: Path) -> None:
    # Charliecloud pulls with ch-image on the login node, but nodes run ch-run: a node without
    # ch-run is the problem, a node without ch-image is not (it was the other way round)
    spec = spec_for(tmp_path, container_runtime="charliecloud")
    facts = node_facts(**{"ch-run": {"rc": 127, "out": "not on PATH"}})
    lines = by_check(node.node_lines(spec, facts, "/sw/py", None))
    assert lines["ch-run"].status is Status.PROBLEM
    assert "container_runtime charliecloud needs it" in lines["ch-run"].detail
    assert "ch-image" not in lines
    # every runtime's node program is probed by the job, with its own version arguments
    script = node.job_script(spec.execution, "/sw/py", tmp_path / "r.json", None)
    assert "program_fact ch-run --version" in script and "program_fact enroot version" in script
    assert 'export USER="${USER:-$(id -un)}"' in script  # ch-run refuses to start without it


def test_network_route_and_ports_decisions(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    target = node.NetTarget("127.0.0.1", 3128, "--network-target")
    facts = node_facts(network={"rc": 1, "out": "connect: Connection refused"},
                   proxy_vars={"rc": 0, "out": ""}, route={"rc": 0, "out": ""},
                   port_range={"rc": 0, "out": "1024 65535"})
    lines = by_check(node.node_lines(spec, facts, "/sw/py", target))
    assert lines["outbound network"].status is Status.PROBLEM
    assert "https_proxy" in lines["outbound network"].fix
    assert lines["default route"].status is Status.WARNING
    # what a routeless node breaks (downloads at run time) and the way round it; not the old
    # VLLM_HOST_IP advice, which the job's own address choice overwrites (hpc-admin-2 N10)
    assert "execution.offline=true" in lines["default route"].fix
    assert "hpceval stage" in lines["default route"].fix
    assert "VLLM_HOST_IP" not in lines["default route"].fix
    offline = by_check(node.node_lines(spec_for(tmp_path, offline=True), facts, "/sw/py", None))
    assert offline["default route"].status is Status.OK
    assert "execution.offline" in offline["default route"].detail
    assert lines["free ports"].status is Status.WARNING and "1024" in lines["free ports"].detail
    taken = " ".join(str(p) for p in range(8000, 32768))
    full = by_check(node.node_lines(spec, node_facts(listening={"rc": 0, "out": taken}),
                                     "/sw/py", None))
    assert full["free ports"].status is Status.PROBLEM


def test_the_export_setting_of_the_site_is_reported(tmp_path: Path) -> None:
    # SBATCH_EXPORT=NONE (hpc-admin-2 N3): the job's steps pass --export=ALL, but the batch
    # shell starts from the login environment, so what the submit shell's PATH held is missing
    spec = spec_for(tmp_path)
    none = by_check(node.node_lines(spec, node_facts(export_env={"rc": 0, "out": "NONE"}),
                                    "/sw/py", None))["job environment"]
    assert none.status is Status.WARNING and "SLURM_EXPORT_ENV=NONE" in none.detail
    assert "execution.modules" in none.fix and "execution.pre_commands" in none.fix
    default = by_check(node.node_lines(spec, node_facts(export_env={"rc": 0, "out": ""}),
                                       "/sw/py", None))["job environment"]
    assert default.status is Status.OK and "submit" in default.detail
    listed = by_check(node.node_lines(spec, node_facts(export_env={"rc": 0, "out": "NIL"}),
                                      "/sw/py", None))["job environment"]
    assert listed.status is Status.WARNING  # NIL: not even the user's login environment


def test_the_node_job_asks_for_one_gpu_the_way_the_profile_does(tmp_path: Path) -> None:
    # hpc-admin-2 N10: a job without a GPU made the GPUs line a warning on every site, and
    # never found a driver or device-cgroup problem
    typed = spec_for(tmp_path, gpus_per_node=8, gpu_type="h100", gpu_request="gres")
    assert "--gres=gpu:h100:1" in node.job_args(typed.execution, tmp_path)
    plain = spec_for(tmp_path, gpus_per_node=8, gpu_request="gpus-per-node")
    assert "--gpus-per-node=1" in node.job_args(plain.execution, tmp_path)
    none = spec_for(tmp_path, gpus_per_node=0)
    assert not [a for a in node.job_args(none.execution, tmp_path) if "--g" in a]
    smi = {"rc": 0, "out": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"}
    seen = by_check(node.node_lines(typed, node_facts(gpus=smi), "/sw/py", None))["GPUs"]
    assert seen.status is Status.OK and seen.detail.startswith("1 visible")
    none_seen = {"rc": 127, "out": "nvidia-smi not on PATH"}
    blind = by_check(node.node_lines(typed, node_facts(gpus=none_seen), "/sw/py", None))["GPUs"]
    assert blind.status is Status.PROBLEM and "asked for 1 GPU" in blind.detail
    given = node_facts(gpus=none_seen, cuda_visible={"rc": 0, "out": "3"})  # no nvidia-smi
    tools = by_check(node.node_lines(typed, given, "/sw/py", None))["GPUs"]
    assert tools.status is Status.WARNING and "CUDA_VISIBLE_DEVICES=3" in tools.detail


def test_what_a_real_site_does_to_a_job_is_judged(tmp_path: Path) -> None:
    # hpc-admin-2 N11: the probes behind the failures of first jobs on a new site
    healthy = by_check(node.node_lines(spec_for(tmp_path, env_vars={"NCCL_SOCKET_IFNAME": "ib"}),
                                       node_facts(**address_facts("ib")), "/sw/py", None))
    for check in ("node address", "NCCL_SOCKET_IFNAME", "flock", "free space in /tmp",
                  "free space in execution.output_dir", "sbatch from a node",
                  "preemption on gpu"):
        assert healthy[check].status is Status.OK, healthy[check]
    # the servers' own choice: NCCL's prefix form picks ib0
    assert healthy["NCCL_SOCKET_IFNAME"].detail == "ib: ib0 has the IPv4 address 10.1.0.11"
    assert "queued again under its id" in healthy["preemption on gpu"].detail
    broken = node_facts(node_addr={"rc": 0, "out": "node1 127.0.1.1"},
                        flock={"rc": 1, "out": "flock: failed to get lock: Function not "
                                                "implemented"},
                        space={"rc": 0, "out": "Filesystem 1024-blocks Used Available "
                                               "Capacity Mounted on\ntmpfs 4096 0 2048 50% /tmp"},
                        preempt={"rc": 0, "out": "PreemptMode=SUSPEND,GANG"},
                        submit={"rc": 1, "out": "sbatch: error: Batch job submission failed: "
                                                "Access/permission denied"},
                        **address_facts("=ib1"))
    multi = spec_for(tmp_path, nodes=2, env_vars={"NCCL_SOCKET_IFNAME": "=ib1"})
    lines = by_check(node.node_lines(multi, broken, "/sw/py", None))
    assert lines["node address"].status is Status.PROBLEM
    assert "127.0.1.1, a loopback address" in lines["node address"].detail
    assert "/etc/hosts" in lines["node address"].fix
    assert lines["NCCL_SOCKET_IFNAME"].status is Status.PROBLEM
    assert "it has: eth0, ib0, lo" in lines["NCCL_SOCKET_IFNAME"].detail  # =ib1: exact
    assert lines["flock"].status is Status.PROBLEM and "-o flock" in lines["flock"].fix
    assert lines["free space in /tmp"].status is Status.WARNING
    assert "0.0 GiB free" in lines["free space in /tmp"].detail
    assert lines["preemption on gpu"].status is Status.WARNING
    assert lines["sbatch from a node"].status is Status.PROBLEM
    assert "auto_resume" in lines["sbatch from a node"].fix
    # one node: a loopback name is a warning; auto_resume off: no successor to submit
    single = by_check(node.node_lines(spec_for(tmp_path, auto_resume=False), broken, "/sw/py",
                                      None))
    assert single["node address"].status is Status.WARNING
    assert single["sbatch from a node"].status is Status.OK
    assert "NCCL_SOCKET_IFNAME" not in single  # not set: nothing to look for
    excluded = by_check(node.node_lines(spec_for(tmp_path, env_vars={
        "NCCL_SOCKET_IFNAME": "^docker,lo"}), node_facts(**address_facts("^docker,lo")),
        "/sw/py", None))["NCCL_SOCKET_IFNAME"]
    assert excluded.status is Status.OK and "names none" in excluded.detail


def test_network_target_comes_from_the_option_the_proxy_or_an_external_url(
        tmp_path: Path) -> None:
    from hpceval.config.build import build_run_spec

    spec = spec_for(tmp_path)
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
    spec = spec_for(tmp_path, hf_cache_dir=str(odd), modules=["a b; touch pwned2"])
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
    assert facts["export_env"] == {"rc": 0, "out": ""}
    assert facts["flock"]["rc"] == 0 and facts["space"]["rc"] == 0  # here, really
    assert facts["node_addr"]["out"].split()[0] == socket.gethostname()
    assert facts["submit"]["out"].startswith("sbatch ") or facts["submit"]["rc"] != 0
    exported = subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "SLURM_EXPORT_ENV": "NONE"})
    assert exported.returncode == 0, exported.stderr
    facts = json.loads((odd / node.REPORT_FILE).read_text())["facts"]
    assert facts["export_env"] == {"rc": 0, "out": "NONE"}


def _shell_function(script: str, name: str) -> str:
    start = script.index(f"{name}() {{")
    return script[start:script.index("\n}\n", start) + 3]


def test_the_job_script_counts_listening_ports_as_a_model_job_does(tmp_path: Path) -> None:
    """Whether a port is free is the job preamble's rule: the doctor runs the same function,
    not a copy that could drift from it."""
    ex = spec_for(tmp_path).execution
    script = node.job_script(ex, sys.executable, tmp_path / node.REPORT_FILE, None)
    job = (Path(__file__).parents[1] / "golden" / "slurm__single-tp.sbatch").read_text()
    assert _shell_function(script, "listening_ports") == _shell_function(job, "listening_ports")


def test_a_job_that_ends_without_a_report_or_never_reports(tmp_path: Path) -> None:
    ex = spec_for(tmp_path).execution
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


def test_the_wait_asks_the_queue_at_most_every_10_s_and_the_report_every_second(
        tmp_path: Path) -> None:
    # hpc-admin-2 N15: squeue every second for up to --timeout is one RPC per second to a busy
    # slurmctld; the report file is a stat on the doctor's own folder
    class Pending(FakeClient):
        def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
            self.calls.append(("squeue", list(job_ids)))
            return {"42": QueueEntry("42", "PENDING", "Resources", "")}

    now = [0.0]
    looked: list[float] = []

    def sleep(seconds: float) -> None:
        looked.append(now[0])
        now[0] += seconds

    waiting = Pending()
    node.run_node_job(waiting, spec_for(tmp_path).execution, tmp_path, "#!/bin/bash\n",
                      timeout_s=60, sleep=sleep, clock=lambda: now[0])
    asked = [call for call in waiting.calls if call[0] == "squeue"]
    assert 6 <= len(asked) <= 7, asked  # at 0, 10, ..., 50 (60: the deadline)
    assert len(looked) >= 55  # the report is looked for every second meanwhile


def test_doctor_on_node_end_to_end_with_a_fake_client(tmp_path: Path, sinfo: Path) -> None:
    # a Python on NFS (in NFS's table), not this test's own: a checkout in /tmp would add its
    # venv, rightly node-local, to the problems
    spec = spec_for(tmp_path, python="/home/u/venv/bin/python3")
    client = FakeClient(facts=node_facts())
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
    spec = spec_for(tmp_path, python=str(tmp_path / "venv" / "bin" / "python"))
    report = doctor(spec, client=FakeClient(facts=node_facts()), on_node=True, mounts=mounts,
                    environ={})
    assert report.exit_code == 0, report.table()  # GPUs absent in a CPU job: a warning only
    assert report.status is Status.WARNING
    assert report.job_dir is None and not list((tmp_path / "out").iterdir())


def test_the_node_job_goes_where_the_profiles_jobs_go(tmp_path: Path) -> None:
    # a profile that picks its nodes (features, a node list) had its doctor job land on any
    # node of the partition, whose lines then said nothing of the nodes the runs get
    picky = spec_for(tmp_path, constraint="h100&ib",
                     sbatch_extra_flags={"nodelist": "gpu[01-04]", "exclude": "gpu03",
                                         "mail-type": "END"})
    args = node.job_args(picky.execution, tmp_path)
    assert {"--constraint=h100&ib", "--nodelist=gpu[01-04]", "--exclude=gpu03"} <= set(args)
    assert not [a for a in args if a.startswith("--mail")]  # not about where it runs
    assert not [a for a in node.job_args(spec_for(tmp_path).execution, tmp_path)
                if a.startswith(("--constraint", "--nodelist", "--exclude"))]
