"""What the resolved config puts into a harness's command line from the model's serving
engine (the harness command templates themselves: tests/tasks/test_tasks_templates.py)."""

from __future__ import annotations

from pathlib import Path

from tests.config.test_auxiliary import run


def test_a_vllm_model_gives_lm_eval_its_remote_tokenizer_and_a_command_server_does_not(
        tmp_path: Path) -> None:
    """Whether the server answers the tokenizer routes is its engine's (tokenizer_routes):
    vLLM's jobs pass --enable-tokenizer-info-endpoint, a command server may serve anything."""
    vllm = run(tmp_path, task={"name": "arc_easy"}).tasks[0].command
    assert "tokenizer_backend=remote" in vllm
    command = run(tmp_path, model={"type": "command", "command": "my-server --port $PORT",
                                   "checkpoint_path": None},
                  task={"name": "arc_easy"}).tasks[0].command
    assert "local-completions" in command and "tokenizer_backend" not in command
