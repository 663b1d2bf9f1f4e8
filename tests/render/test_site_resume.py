"""Auto-resume and loads that do not fit in the walltime (issue 21, defect 6): a note at load,
no third load after two allocations that never became healthy, the measured load per
allocation recorded by the job and read back for status/info."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from render_helpers import RenderFn, backend_env, resolve
from test_job_trust import function

from hpceval.runs.state import read_loads

RUN: dict[str, Any] = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                                      "served_model_name": "m", "tensor_parallel_size": 8},
                       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}


def test_a_load_longer_than_the_walltime_is_noted(tmp_path: Path) -> None:
    short = resolve("slurm", RUN, tmp_path, ["execution.walltime=00:45:00"])
    notes = [n for n in short.composed.notes if "health_timeout" in n]
    assert len(notes) == 1
    assert "deployment.health_timeout 3600 s + execution.signal_seconds 300 s" in notes[0]
    assert "raise execution.walltime" in notes[0]
    fits = resolve("slurm", RUN, tmp_path, ["execution.walltime=04:00:00"])
    assert not [n for n in fits.composed.notes if "health_timeout" in n]


def _function(script: str, name: str) -> str:
    start = script.index(f"\n{name}() {{") + 1
    return script[start:script.index("\n}\n", start) + 3]


def successor_attempt(script: str, tmp_path: Path, healthy: int, allocations: list[str],
                      loads: list[str]) -> tuple[bool, str]:
    """Run the rendered submit_successor with a recording sbatch: (submitted?, job-failure)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "allocations").write_text("".join(f"{a} 0\n" for a in allocations))
    (model_dir / "loads").write_text("".join(f"{x} 300\n" for x in loads))
    (model_dir / "job-failure").unlink(missing_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/sbatch.calls\n'
                                    "echo 999\n")
    (bin_dir / "sbatch").chmod(0o755)
    calls = tmp_path / "sbatch.calls"
    calls.unlink(missing_ok=True)
    body = ("set -uo pipefail\nlog() { echo \"$*\"; }\n" + backend_env(script)
            + _function(script, "job_failure") + _function(script, "submit_after")
            + _function(script, "submit_successor")
            + f"SERVERS_HEALTHY={healthy} MAX_ALLOCATIONS=10 JOB_SCRIPT=/x.sbatch\n"
            "submit_successor\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_DIR": str(model_dir),
           "RUN_DIR": str(tmp_path), "MODEL_KEY": "m", "SLURM_JOB_ID": allocations[-1],
           "HPCEVAL_INVOCATION_ID": "inv"}
    subprocess.run(["bash", "-c", body], env=env, check=True, capture_output=True, text=True)
    failure = model_dir / "job-failure"
    return calls.exists(), failure.read_text() if failure.exists() else ""


def test_no_third_load_after_two_allocations_that_never_became_healthy(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", RUN, ["execution.walltime=00:45:00"])
    # the first allocation stopped mid-load: it may chain once
    assert successor_attempt(script, tmp_path, 0, ["101"], []) == (True, "")
    # the previous one was healthy: a load that fitted once may fit again
    assert successor_attempt(script, tmp_path, 0, ["101", "102"], ["101"]) == (True, "")
    # this one and the one before never became healthy: no successor, and why
    submitted, failure = successor_attempt(script, tmp_path, 0, ["101", "102"], [])
    assert not submitted
    assert "did not become healthy in 2 allocations in a row" in failure
    assert "execution.walltime 00:45:00" in failure
    # healthy now (stopped while the tasks ran): chains as before
    assert successor_attempt(script, tmp_path, 1, ["101", "102"], [])[0]


def stopped_end(script: str, tmp_path: Path, *, sbatch_works: bool) -> tuple[int, str]:
    """A job stopped by the walltime signal: the rendered submit_successor, then end_stopped,
    with an sbatch that answers a job id or refuses; (exit status, log)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "allocations").write_text("101 0\n")
    (model_dir / "loads").write_text("101 300\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    answer = "echo 999" if sbatch_works else "echo 'sbatch: error: QOS limit' >&2; exit 1"
    (bin_dir / "sbatch").write_text(f"#!/bin/bash\n{answer}\n")
    (bin_dir / "sbatch").chmod(0o755)
    body = ("set -uo pipefail\nlog() { echo \"$*\"; }\n" + backend_env(script)
            + _function(script, "job_failure") + _function(script, "submit_after")
            + _function(script, "submit_successor") + _function(script, "end_stopped")
            + 'SERVERS_HEALTHY=1 MAX_ALLOCATIONS=10 JOB_SCRIPT=/x.sbatch SUCCESSOR=""\n'
            "submit_successor\nend_stopped\necho not-reached\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_DIR": str(model_dir),
           "RUN_DIR": str(tmp_path), "MODEL_KEY": "m", "SLURM_JOB_ID": "101",
           "HPCEVAL_INVOCATION_ID": "inv"}
    proc = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True,
                          check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_stopped_job_exits_0_once_its_successor_is_submitted(render: RenderFn,
                                                              tmp_path: Path) -> None:
    # hpc-admin-2 N13: exit 143 made every healthy allocation of a chain FAILED in sacct (and
    # mailed with mail-type FAIL); the successor carries on, so this allocation succeeded
    script = render("slurm", RUN)
    rc, log = stopped_end(script, tmp_path, sbatch_works=True)
    assert rc == 0 and "job 999 runs the unfinished tasks" in log, log
    assert "not-reached" not in log
    # no successor (refused): the job did stop short, and says so with 143
    rc, log = stopped_end(script, tmp_path, sbatch_works=False)
    assert rc == 143 and "could not submit a successor" in log, log
    # every way a stopped job ends goes through end_stopped, none exits 143 itself
    ends = [line for line in script.splitlines() if "STOPPING" in line and "exit" in line]
    assert ends and all("end_stopped" in line for line in ends), ends


def test_the_job_records_its_load_time_once_healthy(render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", RUN, ["evaluation.overlap_load=false"])
    wait = script.index("if ! bring_up_servers; then")
    record = script.index("\nservers_up\n")
    assert wait < record < script.index("\nstart_model_proxy\n")
    assert 'echo "${HPCEVAL_JOB_ID:-local} $SECONDS" >> "$MODEL_DIR/loads"' in function(
        script, "servers_up")
    # tasks started while the model loads: recorded once the health wait has passed, before
    # the proxy forwards what it holds
    overlapped = function(render("slurm", RUN), "await_servers")  # vLLM: auto is on
    assert overlapped.index("wait_for_servers 1") < overlapped.index("servers_up") \
        < overlapped.index("kill -USR2")
    (tmp_path / "loads").write_text("101 312\nbroken line\n102 95\n")
    assert read_loads(tmp_path) == (("101", 312), ("102", 95))
    assert read_loads(tmp_path / "missing") == ()
