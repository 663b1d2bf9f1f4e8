"""`hpceval watch` on the real Slurm dev cluster: a training job writes 3 checkpoints over time.

The "training job" is a real Slurm job that copies a small model folder to step_1000, then
writes step_2000 half-way (config.json first; it waits until a tick has SEEN the half folder,
which is longer than a tick, then writes the rest), then step_3000, and ends. The watch runs
in grace mode with --after-job on it. Each evaluation is the `command` deployment of the
reference server with one scored chat request (the harness of test_rendered_job.py), so it
takes seconds. The drill proves: every checkpoint evaluated exactly once, the half-written one
only after it was whole, the watch ended by itself after the training job ended, and
`hpceval status WATCH` shows 3 evaluated. It prints the timeline (docs/watch.md has one).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import USER, owned_mkdir, user_command

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.runs.registry import read_registry
from tests.integration.drill_support import hpceval, job_state, wait_for
from tests.integration.test_rendered_job import CATALOGUE, SERVER

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = (1000, 2000, 3000)
HALF = 2000
GRACE_S = 6
INTERVAL_S = 2


@pytest.fixture
def work(user_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """alice's folder on the scratch the nodes share: she trains, watches and evaluates."""
    (user_tmp / "catalogue").mkdir()
    (user_tmp / "catalogue" / "it.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(user_tmp / "catalogue"))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(user_tmp / "hpceval-cache"))
    monkeypatch.setenv("HPCEVAL_WATCH_MIN_INTERVAL", "1")
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    yield user_tmp


def run_file(work: Path) -> Path:
    run: dict[str, Any] = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs"),
                      "walltime": "00:05:00", "mem": "500M"},
        "deployment": {"runtime": "host", "served_model_name": "ref-model",
                       "command": f"exec {sys.executable} {SERVER} --model ref-model",
                       "health_timeout": 60},
        "evaluation": {"tasks": [{"name": "it_ask"}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def model_folder(work: Path) -> Path:
    """A small stand-in for a model directory (the reference server does not read it)."""
    folder = work / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(os.urandom(1 << 20))
    return folder


def training_script(work: Path, model: Path, ckpts: Path, state_file: Path) -> str:
    """The fake training job (bash): each line of timeline.log is `<event> <step> <epoch>`."""
    q = shlex.quote
    log = q(str(work / "timeline.log"))
    return f"""set -euo pipefail
stamp() {{ echo "$1 $2 $(date +%s.%N)" >> {log}; }}
save() {{ cp -r {q(str(model))} {q(str(ckpts))}/step_$1; stamp landed "$1"; }}
sleep 3
save 1000
sleep 6
mkdir {q(str(ckpts))}/step_{HALF}
cp {q(str(model))}/config.json {q(str(ckpts))}/step_{HALF}/
stamp half {HALF}
# longer than a tick: until a tick has seen the half-written folder (60 s at most)
for _ in $(seq 600); do grep -qs '"step_{HALF}"' {q(str(state_file))} && break; sleep 0.1; done
sleep 1
cp {q(str(model))}/tokenizer.json {q(str(model))}/model.safetensors {q(str(ckpts))}/step_{HALF}/
stamp landed {HALF}
sleep 6
save 3000
"""


def ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def test_watch_evaluates_three_checkpoints_written_over_time(
        slurm_cluster: CommandSlurmClient, work: Path) -> None:
    client = slurm_cluster
    ckpts = owned_mkdir(work / "checkpoints")
    model = model_folder(work)
    runs = run_file(work)
    # the training job is alice's own, as its checkpoints are: the watch ignores folders
    # another user (root too) owns
    script = work / "fake-training.sbatch"
    out = work / "fake-training.out"
    script.write_text(f"#!/bin/bash\n#SBATCH --output={out}\n#SBATCH --time=5\n"
                      + training_script(work, model, ckpts, work / "state-file-link"))
    t0 = time.time()
    submitted = user_command(USER, ["sbatch", "--parsable", "--partition=drill", str(script)],
                             os.environ)
    assert submitted.returncode == 0, submitted.stderr
    train = submitted.stdout.strip()
    started = hpceval("watch", "start", str(runs), "--checkpoints", str(ckpts),
                      "--grace", f"{GRACE_S}s", "--interval", f"{INTERVAL_S}s",
                      "--after-job", train)
    if started.returncode != 0:
        client.cancel([train])
    assert started.returncode == 0, started.stdout + started.stderr
    watch_id = started.stdout.split()[1].rstrip(":")
    watch_dir = work / "runs" / watch_id
    (work / "state-file-link").symlink_to(watch_dir / "state.json")
    state_file = watch_dir / "state.json"

    def ended() -> bool:
        return bool(json.loads(state_file.read_text())["status"] == "ended")

    try:
        wait_for(ended, 150, "the watch to end by itself", interval=1.0)
    finally:
        if not ended():
            hpceval("watch", "stop", watch_id)
            client.cancel([train])
    state = json.loads(state_file.read_text())
    assert job_state(client, train) == "COMPLETED", out.read_text() if out.exists() else out
    entries = state["checkpoints"]
    assert sorted(entries) == [f"step_{s}" for s in STEPS]
    assert all(e["status"] == "submitted" and e["attempts"] == 1 for e in entries.values())
    # exactly once: one run directory and one registry line per checkpoint
    run_dirs = sorted(p for p in (work / "runs").iterdir() if (p / "run.json").is_file())
    assert len(run_dirs) == 3
    assert sorted(e["run_dir"] for e in entries.values()) == sorted(map(str, run_dirs))
    assert len(read_registry(work / "runs")) == 3
    events = [line.split() for line in (work / "timeline.log").read_text().splitlines()]
    landed = {int(step): float(at) for what, step, at in events if what == "landed"}
    half = {int(step): float(at) for what, step, at in events if what == "half"}
    # the half-written checkpoint was seen before it was whole, and submitted only after
    assert entries[f"step_{HALF}"]["first_seen"] < landed[HALF]
    for step in STEPS:  # grace mode: unchanged for GRACE_S seconds after its last file
        assert entries[f"step_{step}"]["claimed_at"] >= landed[step] + GRACE_S
    # the watch ended after the training job, and no tick is left in the queue
    last_tick = state["ticks"][-1]["id"]
    wait_for(lambda: job_state(client, last_tick) == "COMPLETED", 60, "the last tick to end")
    train_end = ts(client.sacct([train])[train].end)
    assert train_end is not None and state["last_tick"]["at"] >= train_end
    # every evaluation finishes; status shows 3 evaluated
    jobs = [e["job_ids"][0] for e in entries.values()]
    wait_for(lambda: all(job_state(client, j) in ("COMPLETED", "FAILED") for j in jobs), 150,
             "the evaluations to finish", interval=1.0)
    shown = hpceval("status", watch_id, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "ended"
    assert data["summary"]["evaluated"] == 3, shown.stdout
    text = hpceval("status", watch_id)
    assert "3 seen, 3 evaluated" in text.stdout, text.stdout
    # score against the training step: one row per checkpoint, and the report page
    table = hpceval("results", watch_id, "--json")
    assert table.returncode == 0, table.stderr
    rows = json.loads(table.stdout)
    assert [r["step"] for r in rows] == list(STEPS)
    assert all(r["tasks_done"] == r["tasks_total"] == 1 for r in rows)
    page = hpceval("report", watch_id, "-O", str(work / "steps.html"))
    assert page.returncode == 0, page.stderr
    assert "score vs training step" in (work / "steps.html").read_text()
    print("\n" + hpceval("results", watch_id).stdout + text.stdout)
    print_timeline(t0, landed, half, entries, client.sacct(jobs), train_end, state,
                   client.sacct([t["id"] for t in state["ticks"]]))


def print_timeline(t0: float, landed: dict[int, float], half: dict[int, float],
                   entries: dict[str, Any], records: dict[str, Any], train_end: float,
                   state: dict[str, Any], ticks: dict[str, Any]) -> None:
    rows = [f"{'step':>6} {'half':>6} {'landed':>7} {'seen':>6} {'claimed':>8} "
            f"{'eval start':>10} {'eval end':>8}  (s after the training job was submitted; "
            "half: its first file; eval times from sacct, whole seconds)"]
    for step in STEPS:
        e = entries[f"step_{step}"]
        rec = records[e["job_ids"][0]]

        def rel(value: float | None) -> str:
            return "-" if value is None else f"{value - t0:.1f}"

        rows.append(f"{step:>6} {rel(half.get(step)):>6} {rel(landed[step]):>7} "
                    f"{rel(e['first_seen']):>6} {rel(e['claimed_at']):>8} "
                    f"{rel(ts(rec.start)):>10} {rel(ts(rec.end)):>8}")
    rows.append(f"training job ended at {train_end - t0:.1f}; the watch ended at "
                f"{state['last_tick']['at'] - t0:.1f} after {len(state['ticks'])} ticks")
    elapsed = sorted(r.elapsed_s for r in ticks.values() if r.elapsed_s is not None)
    if elapsed:
        rows.append(f"tick jobs: {len(elapsed)} ran, {elapsed[len(elapsed) // 2]} s median, "
                    f"{elapsed[-1]} s longest (sacct Elapsed)")
    print("\nwatch drill timeline\n" + "\n".join(rows))
