"""A harness log stays bounded (shared-cluster-4 N7: a harness wrote a 1 GiB harness.log and
the task passed). The rendered `bound_logs` runs in bash beside a writer that appends without
end, as a harness does through the job's redirect."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from render_helpers import RenderFn
from test_job_trust import function

RUN = {"deployment": {"type": "none"},
       "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                   "model_id": "m"}},
       "evaluation": {"tasks": [{"name": "gsm8k"}]}}


def test_the_harness_writes_its_log_in_append_mode(render: RenderFn) -> None:
    script = render("local-dev", RUN)
    run_task = function(script, "run_task")
    assert re.search(r'^  : > "\$TASK_DIR/harness\.log"$', run_task, re.M), run_task
    assert re.search(r'\$harness" \\\n    >> "\$TASK_DIR/harness\.log" 2>&1 &', run_task), run_task
    assert "  bound_logs\n" in function(script, "watchdog")


def test_a_log_past_its_bound_keeps_its_tail_and_starts_again(render: RenderFn,
                                                              tmp_path: Path) -> None:
    script = render("local-dev", RUN)
    task = tmp_path / "models" / "m" / "tasks" / "t.one"
    task.mkdir(parents=True)
    log = task / "harness.log"
    log.write_text("")
    # a harness that never stops writing, in append mode as run_task starts it
    writer = subprocess.Popen(["bash", "-c", f'while :; do printf "%099d\\n" 0; done >> {log}'])
    try:
        code = (function(script, "bound_logs") + f"""
MODEL_DIR={tmp_path}/models/m
HARNESS_LOG_MAX=$((1 << 20)) HARNESS_LOG_KEPT=$((64 << 10))
TASK_PIDS=({writer.pid} 999999999) TASK_KEYS=(t.one t.gone)
for _ in $(seq 40); do bound_logs; stat -c %s {log}; sleep 0.05; done
""")
        out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                             check=False)
    finally:
        writer.kill()
        writer.wait()
    assert out.returncode == 0, out.stderr
    sizes = [int(n) for n in out.stdout.split()]
    # right after each look the log is within its bound (the writer adds a little meanwhile)
    assert max(sizes) < (1 << 20) + (512 << 10), sizes
    kept = task / "harness.log.1"
    # its tail: at least the bytes kept (tail reads on to the end while the writer appends), all
    # the writer's; a writer's line may be cut where the copy began or ended, never zero-filled
    tail = kept.read_bytes()
    assert 64 << 10 <= len(tail) < 128 << 10, len(tail)
    assert set(tail) <= set(b"0\n") and b"0" * 99 + b"\n" in tail
    # the writer went on at the new end after each truncation (append mode): no hole
    with log.open("rb") as handle:
        assert not handle.read(4096).startswith(b"\0")
    # once more, still: the log holds only the note, saying where its tail went
    log.write_bytes(b"a" * (2 << 20) + b"the end\n")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        once = subprocess.run(["bash", "-c", function(script, "bound_logs") + f"""
MODEL_DIR={tmp_path}/models/m HARNESS_LOG_MAX=$((1 << 20)) HARNESS_LOG_KEPT=16
TASK_PIDS=({sleeper.pid}) TASK_KEYS=(t.one)
bound_logs"""], capture_output=True, text=True, timeout=60, check=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert once.returncode == 0, once.stderr
    assert kept.read_bytes() == b"aaaaaaaathe end\n"
    assert log.read_text() == (f"hpceval: this log passed 1048576 bytes: its last 16 bytes "
                               f"before this line are in {kept}, the rest was dropped\n")
