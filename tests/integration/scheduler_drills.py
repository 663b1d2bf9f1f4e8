"""The scheduler drills' run (tests/integration/test_fault_drills_cancel.py and
test_fault_drills_node.py): one model, the oracle server (tests/fakes/oracle_server.py) behind
a `command` deployment, and a cheap host harness (curl + a few lines of Python) in the drills'
own catalogue, so each drill takes seconds, not minutes. Task `hold` answers one request, then
on its first run only (a marker file) waits ten minutes: the interruption always falls inside
it, and the resumed job finishes it at once.

Also what every drill checks afterwards: what `hpceval status` says (state AND reason, from
the CLI), and that `hpceval resume` finishes the run.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import resumed

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    Submitted,
    hpceval,
    oracle_command,
    status,
    wait_done,
)

MODEL = "oracle"
QUICK, HOLD = "drill-harness.quick", "drill-harness.hold"
RESUMED = "`hpceval resume` continues"
SCORE = ("import json, sys; d = sys.argv[1]; r = json.load(open(d + '/response.json')); "
         "a = r['choices'][0]['message']['content']; "
         "json.dump({'results': {sys.argv[2]: {'answered,none': float(bool(a))}}}, "
         "open(d + '/results_0.json', 'w'))")
CATALOGUE = """\
schema: 1
harness:
  name: drill-harness
  description: one chat request with curl, scored; `hold` then waits on its first run
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: |
    {%- set rest = '", "messages": [{"role": "user", "content": "What is 2+2?"}]}' -%}
    {%- set body = '{"model": "' ~ model_id ~ rest -%}
    curl -sf -H 'Content-Type: application/json' \\
      -H @<(echo "Authorization: Bearer ${OPENAI_API_KEY:-}") \\
      -d {{ body | q }} {{ endpoint_url | q }} \\
      -o {{ output_dir | q }}/response.json || exit 3
    {% if task.task_id == "hold" -%}
    {%- set marker = params.extra.marker | q %}
    if [ ! -e {{ marker }} ]; then touch {{ marker }}; sleep 600; fi
    {% endif -%}
    python3 -c {{ score | q }} {{ output_dir | q }} {{ task.name | q }}
tasks:
  - {name: quick, task_id: quick, endpoint_type: chat, description: one request}
  - {name: hold, task_id: hold, endpoint_type: chat, description: "one request, then waits once"}
""".replace("{{ score | q }}", shlex.quote(SCORE))




@contextmanager
def drill_env(folder: Path) -> Iterator[Path]:
    """The drill's own catalogue and caches in ``folder`` (the nodes are this machine: tmp is
    shared), in the environment while the block runs."""
    (folder / "catalogue").mkdir(exist_ok=True)
    (folder / "catalogue" / "drill.yaml").write_text(CATALOGUE)
    mp = pytest.MonkeyPatch()
    mp.setenv("HPCEVAL_TASKS_PATH", str(folder / "catalogue"))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR"):
        mp.setenv(name, str(folder / name.lower()))
    for name in ("HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        mp.delenv(name, raising=False)
    try:
        yield folder
    finally:
        mp.undo()


def run_file(work: Path, tasks: Sequence[str], *, partition: str | None = None,
             load_once_s: int = 0) -> Path:
    """One model, tasks of the drill harness; `load_once_s`: the server's first start sleeps
    that long before serving (a model load), later starts serve at once."""
    command = oracle_command(MODEL, work / "requests.jsonl")
    if load_once_s:
        marker = shlex.quote(str(work / "loaded-once"))
        command = f"[ -e {marker} ] || {{ touch {marker}; sleep {load_once_s}; }}; {command}"
    execution: dict[str, Any] = {"nodes": 1, "gpus_per_node": 0, "walltime": "00:15:00",
                                 "output_dir": str(work / "runs")}
    if partition:
        execution["partition"] = partition
    marker = str(work / "held-once")
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": execution,
        "deployment": {"served_model_name": MODEL, "health_timeout": 300, "command": command},
        "evaluation": {"tasks": [{"name": f"drill-harness.{t}",
                                  "params": {"extra": {"marker": marker}}} for t in tasks]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def holding(run: Submitted, work: Path) -> bool:
    """`quick` is done and `hold` has its answer (the server answers) and now waits."""
    return (run.task_dir(QUICK) / "done").exists() and (work / "held-once").exists()


def resume_and_finish(client: CommandSlurmClient, run: Submitted, tasks: Sequence[str]
                      ) -> str:
    """`hpceval resume RUN` (the CLI); the resumed job completes and every task is done."""
    job = resumed(hpceval("resume", str(run.run_dir)))
    assert run.jobs()[-1] == job
    assert wait_done(client, job, 120) == "COMPLETED", run.log(job)[-3000:]
    assert_finished(run, tasks, attempts=len(run.jobs()))
    return job


def assert_finished(run: Submitted, tasks: Sequence[str], attempts: int) -> None:
    shown = status(run.run_dir)
    [model] = shown["models"]
    assert (shown["state"], model["attempts"]) == ("done", attempts), shown
    for key in (f"drill-harness.{t}" for t in tasks):
        result = json.loads((run.task_dir(key) / "results.json").read_text())
        [metric] = result["metrics"]
        assert (metric["name"], metric["value"]) == ("answered", 1.0), result


def assert_status(run: Submitted, state: str, reason: str) -> dict[str, Any]:
    """`hpceval status` shows `state`, and a reason that matches the regex `reason`."""
    shown = status(run.run_dir)
    assert shown["state"] == state and re.fullmatch(reason, shown["reason"]), shown
    return shown


