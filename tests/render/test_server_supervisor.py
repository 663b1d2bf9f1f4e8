"""A server step ends with its server (shared-cluster-4 F1 and N6): the rendered step wrapper
(PIN_GPUS) runs in bash with stand-in servers that leave a child behind, as vLLM's API server
leaves its EngineCore when it is killed. The child would keep the step, and the srun client the
job's proxy watches, alive, so the proxy kept trusting the port another uid took over."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from render_helpers import RenderFn
from test_multinode_env import pin_gpus

RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m"},
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for this purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def start(script: str, server: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """The step: the wrapper starting SERVER (bash code; $1 is the folder for its pid files)."""
    return subprocess.Popen(["/bin/bash", "-c", pin_gpus(script), "pin-gpus", "localhost", "",
                             "0", "0", "bash", "-c", server, "server", str(tmp_path)],
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def wait_file(path: Path) -> int:
    deadline = time.monotonic() + 20
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, path
        time.sleep(0.05)
    return int(path.read_text())


# the "API server": starts an "engine" in its process group, then waits or exits
ENGINE = 'sleep 300 & echo $! > "$1/engine"; echo $$ > "$1/server"; '


def test_a_server_that_exits_takes_what_it_left_with_the_step(render: RenderFn,
                                                             tmp_path: Path) -> None:
    step = start(render("slurm", RUN), ENGINE + "sleep 0.5; exit 3", tmp_path)
    engine = wait_file(tmp_path / "engine")
    assert step.wait(timeout=20) == 3  # the server's status is the step's
    time.sleep(0.2)
    assert not alive(engine)  # before: the engine lived on, and with it the step


def test_a_killed_server_ends_the_step_at_once(render: RenderFn, tmp_path: Path) -> None:
    step = start(render("slurm", RUN), ENGINE + "sleep 300", tmp_path)
    engine, server = wait_file(tmp_path / "engine"), wait_file(tmp_path / "server")
    os.kill(server, signal.SIGKILL)  # as the review killed vLLM's API server
    killed_at = time.monotonic()
    assert step.wait(timeout=20) == 128 + signal.SIGKILL
    # SIGKILL to the group is delivered, not yet acted on, when kill() returns: on a loaded
    # machine the engine may take a moment to die (the full suite failed so once)
    while alive(engine) and time.monotonic() - killed_at < 2:
        time.sleep(0.02)
    assert time.monotonic() - killed_at < 2 and not alive(engine)


def test_term_reaches_the_servers_group_and_the_step_ends_with_its_status(
        render: RenderFn, tmp_path: Path) -> None:
    server = 'trap "exit 0" TERM; ' + ENGINE + "while :; do sleep 0.1; done"
    step = start(render("slurm", RUN), server, tmp_path)
    engine = wait_file(tmp_path / "engine")
    wait_file(tmp_path / "server")
    step.send_signal(signal.SIGTERM)  # only the wrapper: it passes TERM on to the group
    assert step.wait(timeout=20) == 0  # vLLM ending cleanly on TERM: the step is COMPLETED
    time.sleep(0.2)
    assert not alive(engine)


def test_a_server_asked_to_stop_ends_its_step_with_0_whatever_it_says(
        render: RenderFn, tmp_path: Path) -> None:
    """A headless vLLM worker on another node errors out when its head stops first (both steps
    get TERM at teardown): its step was FAILED in every successful TP=2 job across nodes once
    the site in a box gave each node its own /dev/shm. Asked to stop, a step ends with 0; a
    server that fails before anyone asked still fails its step (the first test)."""
    server = 'trap "exit 1" TERM; ' + ENGINE + "while :; do sleep 0.1; done"
    step = start(render("slurm", RUN), server, tmp_path)
    engine = wait_file(tmp_path / "engine")
    wait_file(tmp_path / "server")
    step.send_signal(signal.SIGTERM)
    assert step.wait(timeout=20) == 0
    time.sleep(0.2)
    assert not alive(engine)
