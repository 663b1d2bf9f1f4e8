"""The servers' end at teardown (hpc-admin-2 N6): on Slurm, TERM reaches each server step's
processes through Slurm (scancel --signal=TERM JOB.STEP, found by the steps' name), so a step
ends as its process does (COMPLETED) instead of srun forcing it down (CANCELLED+ 0:9 on every
successful job). The rendered stop_servers runs here with a recording squeue and scancel; the
real job's step states are checked in tests/integration/test_parallel_layouts.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from render_helpers import RenderFn
from test_job_trust import function

RUN: dict[str, Any] = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                                      "served_model_name": "m"},
                       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}

# A server: exits 0 on what scancel --signal=TERM delivers (here USR1, so the two paths differ),
# and records a TERM sent to it directly (what srun's client would turn into a forced kill).
SERVER = 'trap "exit 0" USR1; trap "echo direct >> $DIRECT; exit 143" TERM; ' \
         'while :; do sleep 0.1; done'


def fake_slurm(tmp_path: Path, *, squeue_works: bool = True) -> Path:
    """squeue lists two server steps (and a step of another name) of the job it is asked
    about: for 77 in an array element, also one of element 77_0, as the real one does for the
    array's own id; scancel delivers its signal to the server that step i runs (its pid in
    pid.<i>)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    steps = "".join(f"echo \"$job.{i} hpceval-server\"\n" for i in range(2))
    (bin_dir / "squeue").write_text(
        "#!/bin/bash\n" + (f"echo \"$@\" >> {tmp_path}/squeue.calls\njob=${{4}}\n{steps}"
                           "echo \"$job.9 hpceval-harness\"\necho \"$job.batch batch\"\n"
                           "[ \"$job\" != 77 ] || [ -z \"${SLURM_ARRAY_TASK_ID:-}\" ] ||"
                           " echo '77_0.0 hpceval-server'\n"
                           if squeue_works else "exit 1\n"))
    (bin_dir / "scancel").write_text(
        f"#!/bin/bash\necho \"$@\" >> {tmp_path}/scancel.calls\n"
        f"for step in \"${{@:2}}\"; do kill -USR1 \"$(cat {tmp_path}/pid.${{step##*.}})\"; done\n")
    for tool in ("squeue", "scancel"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def stop(script: str, tmp_path: Path, *, squeue_works: bool = True,
         **slurm: str) -> tuple[str, float]:
    """Start two servers as the job's children, then the rendered stop_servers: (what was sent
    to the servers directly, seconds stop_servers took)."""
    direct = tmp_path / "direct"
    bin_dir = fake_slurm(tmp_path, squeue_works=squeue_works)
    stop_servers = script[script.index("SERVER_STEP_NAME="):script.index("\ncleanup() {")]
    body = (function(script, "wait_processes") + "\n" + function(script, "stop_processes")
            + "\n" + function(script, "own_job") + "\n" + stop_servers
            + "SERVER_PIDS=()\nfor i in 0 1; do\n  bash -c \"$SERVER\" &\n"
            f"  SERVER_PIDS+=($!); echo $! > {tmp_path}/pid.$i\ndone\n"
            "sleep 0.5\nstarted=$SECONDS\nstop_servers\necho took=$((SECONDS - started))\n")
    proc = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=120,
                          check=False, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SERVER": SERVER,
                                            "SLURM_JOB_ID": "77", "DIRECT": str(direct),
                                            **slurm})
    assert proc.returncode == 0 and "command not found" not in proc.stderr, proc.stderr
    took = float(proc.stdout.rsplit("took=", 1)[1])
    return direct.read_text() if direct.exists() else "", took


def test_server_steps_get_term_through_slurm_and_end_on_their_own(render: RenderFn,
                                                                   tmp_path: Path) -> None:
    script = render("slurm", RUN)
    # the steps are launched under the name stop_servers looks for
    assert re.search(r'--job-name="\$SERVER_STEP_NAME"', function(script, "launch_server"))
    direct, took = stop(script, tmp_path)
    assert (tmp_path / "scancel.calls").read_text() == "--signal=TERM 77.0 77.1\n"
    assert "-s -j 77" in (tmp_path / "squeue.calls").read_text()
    assert direct == "" and took < 10  # no TERM to a client: each ended on its own


def test_an_array_element_stops_its_own_steps_not_its_siblings(render: RenderFn,
                                                               tmp_path: Path) -> None:
    """The element that starts last carries the array's own id as its job id, and `squeue -j`
    with that id lists every element's steps: its cleanup stopped the other elements' servers
    (a sweep's model-a lost its vLLM when model-b ended, twice in CI). It asks for its own."""
    script = render("slurm", RUN)
    direct, _ = stop(script, tmp_path, SLURM_ARRAY_JOB_ID="77", SLURM_ARRAY_TASK_ID="1")
    assert "-s -j 77_1 " in (tmp_path / "squeue.calls").read_text()
    assert (tmp_path / "scancel.calls").read_text() == "--signal=TERM 77_1.0 77_1.1\n"
    assert direct == ""
    for name in ("preempted", "requeued"):  # its own record, not the array's every element
        assert 'scontrol show job "$(own_job)"' in function(script, name)


def test_without_the_queue_the_servers_still_stop(render: RenderFn, tmp_path: Path) -> None:
    direct, _ = stop(render("slurm", RUN), tmp_path, squeue_works=False)
    assert not (tmp_path / "scancel.calls").exists()
    assert direct == "direct\ndirect\n"  # TERM to each process, as before


def test_local_servers_stop_as_process_groups(render: RenderFn) -> None:
    script = render("local", {**RUN, "deployment": {**RUN["deployment"], "runtime": "host"}})
    assert "scancel" not in script and "hpceval-server" not in script
    assert function(script, "stop_servers").count("stop_processes") == 1
