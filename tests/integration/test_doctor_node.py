"""`hpceval doctor --on-node` on the real dev cluster (issue 21): the command submits its one
CPU job to the local-dev profile's partition and prints the compute node's lines. What proves
they came from the job: Slurm's own record of that job id, hpceval's version as the job's
interpreter imported it, the node's route and address as the site in a box made them (no
default route, its own bridge address), a listener at the login address only the job connects
to, and that listener's port missing from the free ports, and SBATCH_EXPORT=NONE in the submit
shell reported as the job saw it. Nothing leaves the site's bridge. alice, the site's ordinary
user, runs the doctor, from a folder of hers on the site's scratch."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import site
from support.site_users import USER, owned_mkdir, user_command

import hpceval
from hpceval.backends.slurm.client import CommandSlurmClient

pytestmark = pytest.mark.slurm


def _listener() -> socket.socket:
    """A TCP listener where the nodes reach this host (the login address on the site in a box),
    at a port in the doctor's range (8000-32767)."""
    for port in range(29000, 29500):
        sock = socket.socket()
        try:
            sock.bind((site.login_address(), port))
        except OSError:
            sock.close()
            continue
        sock.listen(8)
        return sock
    pytest.fail(f"no free port on {site.login_address()} in 29000-29499")


def _final_state(client: CommandSlurmClient, job_id: str) -> str:
    """sacct's state of the job once final (sacct lags the controller by a few seconds)."""
    state, deadline = "", time.monotonic() + 30
    while time.monotonic() < deadline:
        record = client.sacct([job_id]).get(job_id)
        state = record.state if record else ""
        if state and state not in ("PENDING", "RUNNING", "COMPLETING"):
            break
        time.sleep(1)
    return state


def test_doctor_on_node_reports_from_a_real_job(slurm_cluster: CommandSlurmClient,
                                                user_tmp: Path) -> None:
    sock = _listener()
    target, port = sock.getsockname()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    # as on a site that sets it: the job then has SLURM_EXPORT_ENV=NONE, which doctor reports
    env["SBATCH_EXPORT"] = "NONE"
    runs = owned_mkdir(user_tmp / "runs")  # doctor makes no folder (hpc-admin-2 N11)
    try:
        run = user_command(USER, [
            sys.executable, "-m", "hpceval", "doctor", "local-dev", "--on-node", "--json",
            "--timeout", "180", "--network-target", f"{target}:{port}",
            "-o", f"execution.output_dir={runs}",
            # node1: node2's own name resolves to loopback on it (the next test)
            "-o", "execution.sbatch_extra_flags={nodelist: node1}"], env, timeout=240)
    finally:
        sock.close()
    report = json.loads(run.stdout)
    lines = {(line["where"], line["check"]): line for line in report["lines"]}
    # the output dir is on the site's scratch, a local disk here: a warning, as a dev cluster's
    # would be; this interpreter's venv is a problem when the checkout is in /tmp (a clone made
    # there, as CI's): node-local on a real cluster (exit 1)
    venv = os.path.realpath(os.path.dirname(os.path.abspath(sys.executable)))
    expected = ["HPCEVAL_PYTHON"] if venv.startswith("/tmp/") else []
    problems = [check for (_, check), line in lines.items() if line["status"] == "problem"]
    assert problems == expected, run.stdout
    assert lines[("login", "output dir")]["status"] == "warning", run.stdout
    assert run.returncode == (1 if expected else 0), run.stdout
    job_id = report["job_id"]
    assert job_id and _final_state(slurm_cluster, job_id) == "COMPLETED"

    importable = lines[("node", "hpceval importable")]
    assert importable["status"] == "ok"
    assert f"hpceval {hpceval.__version__}" in importable["detail"]
    assert importable["detail"].startswith(sys.executable)

    route = lines[("node", "default route")]
    address = lines[("node", "node address")]
    if site.nodes_have_own_network():
        # the site in a box: a compute node has no route out (fine for local-dev, which is
        # offline), and its name is its own address
        assert route["status"] == "ok" and route["detail"] == (
            "none (empty); execution.offline is set: the job fetches nothing from the node"), route
        node = address["detail"].partition(" is ")[0]
        assert address["status"] == "ok" and address["detail"] == (
            f"{node} is {site.addresses()[node]}"), address
    else:
        # the kind cluster: the login host's route, and every node name is 127.0.0.1 (a
        # warning for this one-node profile)
        here = subprocess.run(["ip", "route", "show", "default"], capture_output=True,
                              text=True, check=False).stdout.strip() if shutil.which("ip") else ""
        assert route["status"] == ("ok" if here else "warning"), route
        assert address["status"] == "warning" and "loopback" in address["detail"], address

    # what a real site does to a job (hpc-admin-2 N11), as the dev cluster answers: flock and
    # submitting from a node work, and the debug partition cancels on preemption
    assert lines[("node", "flock")]["status"] == "ok"
    assert lines[("node", "sbatch from a node")]["status"] == "ok", lines[
        ("node", "sbatch from a node")]
    assert lines[("node", "preemption on debug")]["detail"].startswith("PreemptMode=CANCEL")
    assert lines[("node", "free space in execution.output_dir")]["status"] in ("ok", "warning")
    exported = lines[("node", "job environment")]
    assert exported["status"] == "warning", exported
    assert exported["detail"].startswith("SLURM_EXPORT_ENV=NONE"), exported
    assert lines[("node", "outbound network")]["status"] == "ok"
    assert lines[("node", "outbound network")]["detail"].startswith(f"reached {target}:{port}")
    ports = lines[("node", "free ports")]
    free, _, total = ports["detail"].partition(" ports free")[0].partition(" of ")
    assert ports["status"] in ("ok", "warning") and 0 < int(free) <= int(total)
    if not site.nodes_have_own_network():
        assert int(free) < int(total)  # ours was taken: the node's ports are this host's
    assert lines[("node", "GPUs")]["status"] in ("ok", "warning")  # a CPU job: none is fine
    assert lines[("login", "sbatch --test-only")]["status"] == "ok"
    # the job's folder is kept on a problem only (the next test: always one)
    assert (report["job_dir"] is None) == (not expected), report["job_dir"]


def test_doctor_on_node_reports_each_fault_of_a_broken_profile(
        slurm_cluster: CommandSlurmClient, user_tmp: Path) -> None:
    """hpc-admin-2's "done when": a profile with the faults a real site shows, each reported as
    a problem with its fix, by a real node job: a node whose own name resolves to 127.0.1.1
    (node2 of the site in a box, as Debian's installer writes /etc/hosts) for a profile whose
    jobs span nodes, an interface that the node lacks, more GPUs per node than the nodes have,
    and SBATCH_EXPORT=NONE (a warning: a site may want it; the job's steps pass --export=ALL)."""
    if not site.nodes_have_own_network():
        pytest.skip("the kind cluster: every node name is 127.0.0.1 (SLURM_NETNS=0)")
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["SBATCH_EXPORT"] = "NONE"
    runs = owned_mkdir(user_tmp / "runs")
    run = user_command(USER, [
        sys.executable, "-m", "hpceval", "doctor", "local-dev", "--on-node", "--json",
        "--timeout", "180", "-o", f"execution.output_dir={runs}",
        "-o", "execution.sbatch_extra_flags={nodelist: node2}",
        "-o", "execution.env_vars={NCCL_SOCKET_IFNAME: ib0}",
        "-o", "execution.nodes=2", "-o", "execution.gpus_per_node=8"], env, timeout=240)
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    lines = {line["check"]: line for line in report["lines"]}
    assert lines["node"]["detail"].startswith("node2"), lines["node"]
    for check, words in (("node address", "node2 resolves to 127.0.1.1"),
                         ("NCCL_SOCKET_IFNAME", "no interface ib0"),
                         ("sbatch --test-only", "Requested node configuration")):
        assert lines[check]["status"] == "problem" and words in lines[check]["detail"], (
            lines[check])
        assert lines[check]["fix"], lines[check]
    exported = lines["job environment"]
    assert exported["status"] == "warning" and exported["detail"].startswith(
        "SLURM_EXPORT_ENV=NONE"), exported
    # the job's folder is kept on a problem, private to the user
    kept = Path(report["job_dir"])
    assert kept.parent == runs and (kept.stat().st_mode & 0o077) == 0
    assert kept.stat().st_uid == runs.stat().st_uid  # hers
    assert (kept / f"doctor-{report['job_id']}.log").is_file()
