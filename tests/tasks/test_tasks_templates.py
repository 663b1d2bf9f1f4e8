"""Every command template renders strictly, for every task, into a well-formed shell command."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest

from hpceval.tasks import GENERIC_PARAMS, Catalogue, TaskDef

ENDPOINT_PATHS = {
    "chat": "/chat/completions",
    "vlm": "/chat/completions",
    "completions": "/completions",
    "embedding": "/embeddings",
}

SAMPLE_PARAMS: dict[str, Any] = {
    "limit_samples": 10,
    "parallelism": 8,
    "temperature": 0.0,
    "top_p": 1.0,
    "max_new_tokens": 2048,
    "request_timeout": 600,
    "max_retries": 5,
    "num_fewshot": 5,
    "extra": {"n_samples": 1, "judge": {"url": "http://judge:8000/v1", "model_id": "j m"}},
}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["q"] = shlex.quote  # the rendering layer's filter, exactly
    return env


def _argv(text: str) -> list[str]:
    # Templates may continue lines with backslash-newline, which the shell drops; so do we.
    return shlex.split(text.replace("\\\n", ""))


def _context(task: TaskDef, params: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: None for k in GENERIC_PARAMS}
    merged["extra"] = {}
    merged.update({k: v for k, v in task.params.items() if k != "extra"})
    merged["extra"] = {**dict(task.params.get("extra", {})), **params.get("extra", {})}
    merged.update({k: v for k, v in params.items() if k != "extra"})
    return {
        "task": task,
        "model_id": "my org/model 7b",  # a space: must come out quoted
        "base_url": "http://node01:8000/v1",
        "endpoint_url": "http://node01:8000/v1" + ENDPOINT_PATHS[task.endpoint_type],
        "output_dir": "/results/run 1",
        "api_key_env": None,
        "params": merged,
        "lm_eval_tasks_dir": "/opt/hpceval/tasks/lm_eval_tasks",
        "server_tokenizer": True,
    }


@pytest.mark.parametrize("params", [SAMPLE_PARAMS, {}], ids=["all-params", "no-params"])
def test_every_task_renders(builtin: Catalogue, params: dict[str, Any]) -> None:
    env = _env()
    compiled = {name: env.from_string(h.command) for name, h in builtin.harnesses.items()}
    for task in builtin.tasks:
        text = compiled[task.harness].render(**_context(task, params))
        argv = _argv(text)  # balanced quotes
        assert task.task_id in argv, (task.qualified_name, text)
        assert "my org/model 7b" in " ".join(argv)
        assert "None" not in text and "Undefined" not in text, text
        if params:
            assert "10" in text  # limit_samples reached the command


def test_unlisted_task_renders(builtin: Catalogue) -> None:
    task = builtin.resolve("simple_evals.brand_new", allow_unlisted=True).task
    text = (
        _env()
        .from_string(builtin.harnesses["simple_evals"].command)
        .render(**_context(task, SAMPLE_PARAMS))
    )
    assert "--eval_type brand_new" in text


def test_eval_factory_command_maps_generic_params_to_overrides(builtin: Catalogue) -> None:
    task = builtin.resolve("gpqa_diamond").task
    ctx = _context(task, SAMPLE_PARAMS)
    ctx["api_key_env"] = "MODEL_API_KEY"
    text = _env().from_string(builtin.harnesses[task.harness].command).render(**ctx)
    assert text.startswith("ADAPTER_PORT=$(python3 -c ")  # each run's own adapter port (below)
    argv = _argv(text[text.index("nemo-evaluator"):])
    assert argv[:2] == ["nemo-evaluator", "run_eval"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert flags["--eval_type"] == "gpqa_diamond"
    assert flags["--model_type"] == "chat"
    assert flags["--model_url"] == "http://node01:8000/v1/chat/completions"
    assert flags["--output_dir"] == "/results/run 1"
    assert flags["--api_key_name"] == "MODEL_API_KEY"
    overrides = flags["--overrides"].split(",")
    assert "config.params.limit_samples=10" in overrides
    assert "config.params.parallelism=8" in overrides
    assert "config.params.extra.num_fewshot=5" in overrides
    assert "config.params.extra.judge.model_id=j m" in overrides


def test_lm_eval_is_told_its_tokenizer_where_the_server_has_one(builtin: Catalogue) -> None:
    """local-completions' own choice ("auto") probes /tokenizer_info with a 5-s timeout when
    it starts, which a model still loading (overlap_load) cannot answer: named outright."""
    template = _env().from_string(builtin.harnesses["lm-eval-upstream"].command)

    def model_args(task: str, extra: dict[str, Any], server_tokenizer: bool = True) -> list[str]:
        ctx = _context(builtin.resolve(task).task, {"extra": extra})
        ctx["server_tokenizer"] = server_tokenizer
        argv = _argv(template.render(**ctx))
        return [a for a in argv[argv.index("--model_args") + 1].split(",")
                if a.startswith("tokenizer")]

    assert model_args("arc_easy", {}) == ["tokenizer_backend=remote"]
    assert model_args("arc_easy", {}, server_tokenizer=False) == []
    assert model_args("lm-eval-upstream.ifeval", {}) == []  # chat: lm-eval uses none
    assert model_args("arc_easy", {"tokenizer": "/ckpt/tok"}) == ["tokenizer=/ckpt/tok"]
    assert model_args("arc_easy", {"tokenizer_backend": "huggingface"}) == [
        "tokenizer_backend=huggingface"]


def test_upstream_lm_eval_command(builtin: Catalogue) -> None:
    env = _env()
    template = env.from_string(builtin.harnesses["lm-eval-upstream"].command)
    chat = _argv(template.render(**_context(builtin.resolve("lm-eval-upstream.ifeval").task, {})))
    assert chat[:3] == ["lm_eval", "--model", "local-chat-completions"]
    assert "--apply_chat_template" in chat
    # Harness defaults (parallelism 16) reach --model_args even when the user sets nothing.
    model_args = chat[chat.index("--model_args") + 1]
    assert "num_concurrent=16" in model_args.split(",")

    comp_task = builtin.resolve("arc_easy").task
    comp = _argv(template.render(**_context(comp_task, SAMPLE_PARAMS)))
    # params.extra.judge (NeMo Evaluator's spelling) names the judge to lm_eval's process, where
    # a judged task's hooks read it (hpceval/tasks/lm_eval_tasks/judged_qa/utils.py)
    assert comp[:3] == ["JUDGE_CHAT_URL=http://judge:8000/v1", "JUDGE_MODEL_ID=j m", "lm_eval"]
    comp = comp[2:]
    assert comp[2] == "local-completions" and "--apply_chat_template" not in comp
    assert comp[comp.index("--limit") + 1] == "10"
    assert comp[comp.index("--num_fewshot") + 1] == "5"
    assert comp[comp.index("--gen_kwargs") + 1] == "temperature=0.0,top_p=1.0,max_gen_toks=2048"


def test_shipped_judged_task_finds_its_folder_and_its_judge(builtin: Catalogue) -> None:
    """lm-eval-upstream.judged_qa: lm_eval looks in the installed package's task folder, which
    holds the task's YAML and data, and gets the judge the run names."""
    from hpceval.resources import lm_eval_tasks_dir
    from hpceval.tasks.command import render_command

    task = builtin.resolve("lm-eval-upstream.judged_qa").task
    assert task.needs_judge and task.endpoint_type == "chat"
    params = _context(task, SAMPLE_PARAMS)["params"]
    argv = _argv(render_command(builtin.harnesses[task.harness], task, params,
                                model_id="m", api_key_env=None))
    assert argv[:3] == ["JUDGE_CHAT_URL=http://judge:8000/v1", "JUDGE_MODEL_ID=j m", "lm_eval"]
    folder = argv[argv.index("--include_path") + 1]
    assert folder == str(lm_eval_tasks_dir())
    assert {"judged_qa.yaml", "judged_qa.jsonl", "utils.py"} <= {
        p.name for p in (lm_eval_tasks_dir() / "judged_qa").iterdir()}
    # a user's own include_path wins (lm-eval keeps one)
    params["extra"] = {**params["extra"], "include_path": "/mine"}
    argv = _argv(render_command(builtin.harnesses[task.harness], task, params,
                                model_id="m", api_key_env=None))
    assert argv[argv.index("--include_path") + 1] == "/mine"


def test_eval_factory_tasks_started_at_once_get_adapter_ports_of_their_own(
        builtin: Catalogue, tmp_path: Path) -> None:
    """nemo-evaluator's own port search (bind, close, bind again later from 3825) gave two tasks
    of one job, started in the same second, the same adapter port: one task's requests went to
    the other's adapter, and failed when it ended (a CI run of test_eval_factory_job). The
    rendered command hands each run its own port in ADAPTER_PORT, which nemo-evaluator then
    insists on."""
    task = builtin.resolve("gpqa_diamond").task
    text = _env().from_string(builtin.harnesses[task.harness].command).render(
        **_context(task, SAMPLE_PARAMS))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nemo-evaluator").write_text('#!/bin/sh\necho "$ADAPTER_PORT"\n')
    (fake / "nemo-evaluator").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    runs = [subprocess.Popen(["bash", "-c", text], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(8)]
    ports = [int(run.communicate(timeout=60)[0]) for run in runs]
    assert len(set(ports)) == len(ports) and all(0 < p < 65536 for p in ports), ports
