"""evaluation.overlap_load defaults to "auto": the tasks start while the model loads where its
engine answers what the shipped harnesses ask at start-up (vLLM: the tokenizer routes lm-eval
would otherwise probe with a 5-s timeout), and once the servers serve for a `command` server,
whose routes and load hpceval does not know, and for SGLang, which answers no /tokenizer_info.
true and false win over the engine."""

from __future__ import annotations

import pytest
from render_helpers import RenderFn
from test_job_trust import VLLM_RUN

from hpceval.config.errors import ConfigError

COMMAND_RUN = {"deployment": {"type": "command", "served_model_name": "toy",
                              "command": 'my-server --port "$PORT"'},
               "evaluation": {"tasks": [{"name": "judged"}]}}
SGLANG_RUN = {"deployment": {"type": "sglang", "runtime": "host", "checkpoint_path": "/m",
                             "served_model_name": "m"},
              "evaluation": {"tasks": [{"name": "judged"}]}}


def overlapped(script: str) -> bool:
    """The tasks start before the health wait: await_servers then waits and releases them."""
    return "\nawait_servers() {" in script


@pytest.mark.parametrize(("run", "overrides", "expected"), [
    (VLLM_RUN, [], True),
    (COMMAND_RUN, [], False),
    (SGLANG_RUN, [], False),
    (VLLM_RUN, ["evaluation.overlap_load=false"], False),
    (COMMAND_RUN, ["evaluation.overlap_load=true"], True),
    (VLLM_RUN, ["evaluation.overlap_load=auto"], True),
], ids=["vllm-auto", "command-auto", "sglang-auto", "vllm-false", "command-true",
        "vllm-auto-named"])
def test_auto_starts_the_tasks_beside_the_load_where_the_engine_allows_it(
        render: RenderFn, run: dict, overrides: list[str], expected: bool) -> None:
    assert overlapped(render("slurm", run, overrides)) is expected


@pytest.mark.parametrize("value", ["1", "yes-please", "'true'"])
def test_a_value_that_is_not_auto_true_or_false_is_refused_naming_the_key(
        render: RenderFn, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        render("slurm", VLLM_RUN, [f"evaluation.overlap_load={value}"])
    assert "evaluation.overlap_load" in str(err.value)
    assert ("one of 'auto', true, false" in str(err.value)
            or "did you mean true?" in str(err.value)), err.value
