"""Every task of the shipped catalogue renders into a job script that bash and shellcheck accept."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from render_helpers import DATA, bash_syntax, resolve, shellcheck

from hpceval.config import with_tasks
from hpceval.config.schema import TaskSpec
from hpceval.render import JobContext, render_job
from hpceval.tasks import Catalogue, TaskDef, load_catalogue


def render_tasks(tmp_path: Path, catalogue: Catalogue, names: list[str], file: str) -> Path:
    base = resolve("offline-modules", {
        "deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m",
                       "tensor_parallel_size": 4},
        "target": {"api_endpoint": {"api_key_name": "MY_API_KEY"}},
        # a judge for the judged tasks that take theirs by URL (lm-eval-upstream.judged_qa)
        "evaluation": {"tasks": [{"name": "boxed_chat"}],
                       "env_vars": {"JUDGE_CHAT_URL": "http://judge:8000/v1"}}}, tmp_path)
    template = base.spec.evaluation.tasks[0]
    tasks = [dataclasses.replace(template, name=name) for name in names]
    tasks.append(TaskSpec(name="lm-evaluation-harness.ifeval", timeout=60,
                          params=dataclasses.replace(template.params, limit_samples=10,
                                                     num_fewshot=3, temperature=0.0)))
    spec = dataclasses.replace(base.spec, evaluation=dataclasses.replace(
        base.spec.evaluation, tasks=tasks))
    resolved = with_tasks(dataclasses.replace(base, spec=spec), catalogue)
    text = render_job(resolved, JobContext("/runs/x", "x", "m", "/py"))
    script = tmp_path / file
    script.write_text(text)
    assert text.count("\nharness_") == len(tasks)
    bash_syntax(script)
    return script


def shipped(catalogue: Catalogue) -> list[TaskDef]:
    tasks = [t for t in catalogue.tasks if not t.source.startswith(str(DATA))]
    assert len(tasks) > 100
    return tasks


def test_every_shipped_task_renders_to_valid_bash(tmp_path: Path) -> None:
    catalogue = load_catalogue()
    render_tasks(tmp_path, catalogue, [t.qualified_name for t in shipped(catalogue)], "all.sh")


def test_one_task_per_harness_passes_shellcheck(tmp_path: Path) -> None:
    # shellcheck takes ~20 s on all tasks at once; one per harness covers every template.
    catalogue = load_catalogue()
    first = {t.harness: t.qualified_name for t in reversed(shipped(catalogue))}
    shellcheck([render_tasks(tmp_path, catalogue, sorted(first.values()), "per-harness.sh")])
