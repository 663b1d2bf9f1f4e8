"""A task that asks a judge model is refused at load when the run names no judge for it
(lm-eval-upstream.judged_qa), with the key path and the fix; the ways of naming one pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.config.test_auxiliary import refused, run

JUDGED = "lm-eval-upstream.judged_qa"
REFERENCES = {"url": "auxiliary_deployments.judge.chat_url",
              "model_id": "auxiliary_deployments.judge.model_id"}


def test_a_judged_task_without_a_judge_is_refused_naming_the_key_and_the_fix(
        tmp_path: Path) -> None:
    message = refused(tmp_path, task={"name": JUDGED})
    assert f"evaluation.tasks.{JUDGED}.params.extra.judge.url" in message
    assert "asks a judge model, and the run names none" in message
    assert "auxiliary_deployments.judge.chat_url" in message  # the fix names the reference


@pytest.mark.parametrize(("judge", "task"), [
    # served in the job, named by NeMo Evaluator's references in params.extra.judge
    ({"num_nodes": 0, "tensor_parallel_size": 2}, {"params": {"extra": {"judge": REFERENCES}}}),
    # served in the job and named judge: the job exports JUDGE_CHAT_URL / JUDGE_MODEL_ID
    ({"num_nodes": 0, "tensor_parallel_size": 2}, {}),
    # an external judge given by URL
    (None, {"params": {"extra": {"judge": {"url": "https://judge.example.org/v1",
                                           "model_id": "vendor/judge"}}}}),
    # the variables the task reads, set by the user
    (None, {"env_vars": {"JUDGE_CHAT_URL": "https://judge.example.org/v1",
                         "JUDGE_MODEL_ID": "vendor/judge"}}),
], ids=["references", "aux-named-judge", "external-url", "env"])
def test_each_way_of_naming_the_judge_passes(tmp_path: Path, judge: dict[str, Any] | None,
                                             task: dict[str, Any]) -> None:
    resolved = run(tmp_path, judge=judge, task={"name": JUDGED, **task})
    (only,) = resolved.tasks
    assert only.task.needs_judge and "lm_eval" in only.command


def test_an_aux_deployment_with_another_prefix_does_not_count(tmp_path: Path) -> None:
    """env_prefix GRADER exports GRADER_CHAT_URL, which the task does not read."""
    message = refused(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2,
                                       "env_prefix": "GRADER"}, task={"name": JUDGED})
    assert "asks a judge model, and the run names none" in message


def test_external_api_judged_tasks_keep_their_key_check_instead(tmp_path: Path) -> None:
    """simple-evals' judged tasks take an external judge by JUDGE_API_KEY: no judge URL is
    demanded of them here (their catalogue entry requires the key)."""
    resolved = run(tmp_path, task={"name": "simple_evals.AIME_2025"})
    assert resolved.tasks[0].task.needs_judge


def test_the_references_become_the_judge_proxys_url_and_the_judges_name(tmp_path: Path) -> None:
    resolved = run(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2},
                   task={"name": JUDGED, "params": {"extra": {"judge": REFERENCES}}})
    command = resolved.tasks[0].command
    assert command.startswith('JUDGE_CHAT_URL="${HPCEVAL_AUX_JUDGE_CHAT_URL}" '
                              "JUDGE_MODEL_ID=j lm_eval"), command

