"""One live job per model (hpc-admin-2 N2): the rendered lock code run in bash with the real
flock, as two jobs of one model would run it: a successor that starts while its predecessor
still stops waits for it; one that would run beside a live job stops with the holder named; a
server the first job started does not keep the lock past the job; without flock the job warns
and runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from render_helpers import RenderFn

RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m"},
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
RELEASE = '[ -n "$LOCK_PID" ] && kill -KILL "$LOCK_PID"; echo "released at" $(date +%s.%N)'
STUBS = ('log() { echo "log: $*"; }\n'
         'job_failure() { echo "failure: $*"; }\n')


def lock_code(script: str) -> str:
    start = script.index('LOCK_FILE="$MODEL_DIR/')
    end = script.index("\ndone\n", start) + len("\ndone\n")
    return script[start:end]


@pytest.fixture
def lock(render: RenderFn, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("hpceval.render.job.MODEL_LOCK_WAIT_S", 3)
    script = render("slurm", RUN)
    assert "-w 3 -E 75" in script
    # taken after the traps (cleanup releases it) and before any server starts
    assert script.index("\ntrap cleanup EXIT") < script.index("LOCK_FILE=") < script.index(
        "\nlaunch_server 0 head")
    assert '[ -n "$LOCK_PID" ] && kill -KILL "$LOCK_PID"' in script
    return lock_code(script)


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_job_left() -> Iterator[None]:
    """Whatever a failed test leaves (a holder ignores TERM) goes with its process group."""
    yield
    while STARTED:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(STARTED.pop().pid, signal.SIGKILL)


def job(code: str, model_dir: Path, job_id: str, body: str, path: str = "/usr/bin:/bin",
        traps: str = "") -> subprocess.Popen[str]:
    """A job: sets TRAPS, takes the lock, runs BODY, then releases it as cleanup does."""
    text = (STUBS + traps + "\n" + code + f"\necho 'locked at' $(date +%s.%N)\n{body}\n"
            f'{RELEASE}\n')
    env = {"PATH": path, "MODEL_DIR": str(model_dir), "HPCEVAL_JOB_ID": job_id,
           "MODEL_KEY": "m", "HPCEVAL_INVOCATION_ID": "inv"}
    started = subprocess.Popen(["/bin/bash", "-c", text], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env=env)
    STARTED.append(started)
    return started


def when(out: str, what: str) -> float:
    line = next(line for line in out.splitlines() if line.startswith(what))
    return float(line.split()[-1])


def wait_locked(model_dir: Path, job_id: str) -> None:
    """Until job JOB_ID holds the lock (its token in the file)."""
    lock_file = model_dir / "lock"
    deadline = time.monotonic() + 10
    while not (lock_file.exists() and lock_file.read_text().startswith(job_id + " ")):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_successor_waits_until_its_predecessor_has_stopped(lock: str, tmp_path: Path) -> None:
    first = job(lock, tmp_path, "101", "sleep 1.5")
    wait_locked(tmp_path, "101")
    second = job(lock, tmp_path, "102", "true")
    out1, _ = first.communicate(timeout=30)
    out2, _ = second.communicate(timeout=30)
    assert first.returncode == second.returncode == 0, (out1, out2)
    assert when(out2, "locked at") >= when(out1, "released at"), (out1, out2)


def test_a_job_beside_a_live_one_stops_naming_it(lock: str, tmp_path: Path) -> None:
    first = job(lock, tmp_path, "201", "sleep 6")  # longer than the 3 s the second waits
    wait_locked(tmp_path, "201")
    second = job(lock, tmp_path, "202", "echo 'ran anyway'")
    out2, _ = second.communicate(timeout=30)
    out1, _ = first.communicate(timeout=30)
    assert second.returncode == 1 and "ran anyway" not in out2, out2
    assert first.returncode == 0 and "released at" in out1, out1
    assert "another job of model m (201) held" in out2 and "hpceval resume inv" in out2, out2


def test_a_server_left_running_does_not_keep_the_lock(lock: str, tmp_path: Path) -> None:
    # the first job starts a "server" after taking the lock, and it outlives the job
    server = f"setsid sleep 30 > /dev/null 2>&1 &\necho $! > {tmp_path}/orphan"
    first = job(lock, tmp_path, "301", server)
    out1, _ = first.communicate(timeout=30)
    orphan = int((tmp_path / "orphan").read_text())
    try:
        assert subprocess.run(["kill", "-0", str(orphan)], check=False).returncode == 0
        second = job(lock, tmp_path, "302", "true")
        out2, _ = second.communicate(timeout=30)
        assert second.returncode == 0 and "locked at" in out2, (out1, out2)
    finally:
        subprocess.run(["kill", str(orphan)], check=False)


def test_without_flock_the_job_warns_and_runs(lock: str, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "cut", "sleep", "date", "kill"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (bin_dir / tool).symlink_to(found)
    model = tmp_path / "model"
    model.mkdir()
    alone = job(lock, model, "401", "echo ran", path=str(bin_dir))
    out, _ = alone.communicate(timeout=30)
    assert alone.returncode == 0 and "ran" in out, out
    assert "warning: cannot lock" in out and "(flock status 127)" in out, out


def test_the_term_that_reaches_every_process_leaves_the_lock_to_the_jobs_cleanup(
        lock: str, tmp_path: Path) -> None:
    """A cancel or a preemption signals every process of the job: the holder ignores it, so a
    successor does not start beside a predecessor that is still stopping its tasks."""
    # as the job's own trap, set before the lock: its teardown takes a while, then releases it
    first = job(lock, tmp_path, "501", "sleep 20 & wait $!",
                traps=f"trap 'sleep 1.5; {RELEASE}; exit 143' TERM")
    wait_locked(tmp_path, "501")
    os.killpg(first.pid, signal.SIGTERM)  # the job's whole process group, the holder too
    second = job(lock, tmp_path, "502", "true")
    out1, _ = first.communicate(timeout=30)
    out2, _ = second.communicate(timeout=30)
    assert first.returncode == 143 and second.returncode == 0, (out1, out2)
    assert when(out2, "locked at") >= when(out1, "released at"), (out1, out2)
