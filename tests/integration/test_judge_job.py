"""A judge served inside the model's job, on the real Slurm dev cluster (docs/judge.md).

The model and the judge are both tests/fakes/oracle_server.py behind `command` deployments; the
judge (auxiliary_deployments.judge, NeMo Evaluator's form) gets a node of its own, the job's
second. A host-installed harness reads the judge's URL and name from its params
(``auxiliary_deployments.judge.chat_url`` / ``.model_id``) and from the exported variables, and
sends the judge one request. Checked from the judge's own request log and files: the task
reached the judge through the judge's in-job proxy, whose cache then holds the answer; a second
job over the same run directory replays it instead of asking the judge again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    answered,
    oracle_command,
    own_catalogue,
    sbatch,
    submit_run,
    wait_done,
)

pytestmark = pytest.mark.slurm

SCORE = ("import json, sys; d = sys.argv[1]; r = json.load(open(d + '/judge.json')); "
         "ok = bool(r['choices'][0]['message']['content']); "
         "json.dump({'results': {sys.argv[2]: {'exact_match,none': float(ok)}}}, "
         "open(d + '/results_0.json', 'w'))")
CATALOGUE = """\
schema: 1
harness:
  name: judge-it
  description: one request to the judge, from a host-installed harness
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: |
    {%- set question = "Question: grade 2+2=4\\\\nAnswer:" -%}
    {%- set rest = '", "messages": [{"role": "user", "content": "' ~ question ~ '"}]}' -%}
    {%- set body = '{"model": "' ~ params.extra.judge.model_id ~ rest -%}
    printf '%s\\n' {{ params.extra.judge.url | q }} "$JUDGE_CHAT_URL" \\
      "$HPCEVAL_AUX_JUDGE_MODEL_ID" > {{ output_dir | q }}/seen.txt &&
    curl -sf -H 'Content-Type: application/json' -d {{ body | q }} \\
      -H @<(echo "Authorization: Bearer $HPCEVAL_AUX_JUDGE_API_KEY") \\
      {{ params.extra.judge.url | q }} -o {{ output_dir | q }}/judge.json &&
    python3 -c {{ score | q }} {{ output_dir | q }} {{ task.name | q }}
tasks:
  - {name: judged_once, task_id: judged_once, endpoint_type: chat, description: asks the judge}
""".replace("{{ score | q }}", "{{ " + json.dumps(SCORE) + " | q }}")


@pytest.fixture
def work(user_tmp: Path) -> Iterator[Path]:
    """The test's folder, alice's: she submits the run."""
    with own_catalogue(user_tmp, "judge_it.yaml", CATALOGUE) as root:
        yield root


def run_file(work: Path) -> Path:
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs"),
                      "walltime": "00:05:00"},
        "deployment": {"served_model_name": "model-under-test", "health_timeout": 60,
                       "command": oracle_command("model-under-test", work / "model.jsonl")},
        "auxiliary_deployments": {"judge": {
            "type": "command", "served_model_name": "judge-model", "num_nodes": 1,
            "health_timeout": 60, "runtime": "host",
            "command": oracle_command("judge-model", work / "judge.jsonl")}},
        "evaluation": {"tasks": [{"name": "judge-it.judged_once", "params": {"extra": {
            "judge": {"url": "auxiliary_deployments.judge.chat_url",
                      "model_id": "auxiliary_deployments.judge.model_id"}}}}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def test_judge_in_the_job_is_asked_once_and_replayed_after(
        slurm_cluster: CommandSlurmClient, work: Path) -> None:
    submitted = submit_run(run_file(work))
    state = wait_done(slurm_cluster, submitted.first_job, timeout=240)
    log = submitted.log(submitted.first_job)
    assert state == "COMPLETED", log
    task_dir = submitted.task_dir("judge-it.judged_once")
    assert (task_dir / "done").exists(), log
    script = (submitted.run_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script  # the model's node and the judge's own

    # the task saw the judge's proxy (params and the NEL variable agree) and its model name
    url, nel_url, model_id = (task_dir / "harness" / "seen.txt").read_text().split("\n")[:3]
    assert url == nel_url and url.startswith("http://127.0.0.1:"), url
    assert url.endswith("/v1/chat/completions") and model_id == "judge-model"
    # the judge answered exactly one request, on the job's second node; the model none
    judged = answered(work / "judge.jsonl")
    assert len(judged) == 1 and judged[0]["path"] == "/v1/chat/completions", judged
    nodes = subprocess.run(["scontrol", "show", "hostnames", _nodelist(submitted.first_job)],
                           capture_output=True, text=True, check=True).stdout.split()
    assert judged[0]["node"] == nodes[1], (judged, nodes)
    assert answered(work / "model.jsonl") == []
    judge_dir = submitted.model_dir / "auxiliary" / "judge"
    assert (judge_dir / "server" / "instance-0.log").exists()
    assert "oracle_server.py" in (judge_dir / "server" / "instance-0.cmd").read_text()
    cached = [p for p in (judge_dir / "cache").rglob("*") if p.is_file() and p.stat().st_size]
    assert cached, list((judge_dir / "cache").rglob("*"))

    # a later job over the same run (the task to do again) replays the judge's answer
    for name in ("done", "results.json"):
        (task_dir / name).unlink()
    again = sbatch(str(submitted.run_dir / "job.sbatch"))  # as alice
    state = wait_done(slurm_cluster, again, timeout=240)
    assert state == "COMPLETED", submitted.log(again)
    assert (task_dir / "done").exists()
    assert len(answered(work / "judge.jsonl")) == 1  # not asked again: the cache answered


def _nodelist(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "NodeList"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out, f"no node list for job {job_id}"
    return out[0]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
