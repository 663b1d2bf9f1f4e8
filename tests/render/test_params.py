"""Which value a harness command gets: run config (as written) > catalogue default > schema."""

from __future__ import annotations

from render_helpers import RenderFn

RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m"}}


def model_args(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "--model_args" in line]


def test_catalogue_default_beats_schema_default(render: RenderFn) -> None:
    text = render("slurm", {**RUN, "evaluation": {"tasks": [{"name": "boxed_chat"}]}})
    assert model_args(text) == [
        "--model_args 'model=m,base_url='\"${HPCEVAL_ENDPOINT_URL}\"',num_concurrent=8' \\"]


def test_what_the_user_wrote_wins(render: RenderFn) -> None:
    text = render("slurm", {**RUN, "evaluation": {
        "params": {"parallelism": 64},
        "tasks": [{"name": "boxed_chat"}, {"name": "judged", "params": {"parallelism": 2}}]}})
    assert [a.split("num_concurrent=")[1][:2] for a in model_args(text)] == ["64", "2'"]
