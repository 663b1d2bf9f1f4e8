"""format_task_table and the documented, stable tasks_to_json output."""

from __future__ import annotations

import json

from hpceval.tasks import Catalogue, format_task_table, tasks_to_json
from hpceval.tasks.output import JSON_FIELDS


def test_json_is_stable_and_documented(builtin: Catalogue) -> None:
    tasks = builtin.list(harness="hle") + builtin.list(harness="mtbench")
    text = tasks_to_json(tasks)
    assert text == tasks_to_json(list(reversed(tasks)))  # order of input does not matter
    items = json.loads(text)
    assert [i["qualified_name"] for i in items] == sorted(i["qualified_name"] for i in items)
    for item in items:
        assert tuple(sorted(item)) == tuple(sorted(JSON_FIELDS))
        assert list(item) == sorted(item)  # sorted keys
    hle = next(i for i in items if i["qualified_name"] == "hle.hle")
    assert hle == {
        "aliases": [],
        "canonical": True,
        "description": "Humanity's Last Exam, text-only questions",
        "endpoint_type": "chat",
        "harness": "hle",
        "image": "nvcr.io/nvidia/eval-factory/hle:26.03",
        "name": "hle",
        "needs_gpu": False,
        "needs_judge": True,
        "qualified_name": "hle.hle",
        "required_env": ["HF_TOKEN", "JUDGE_API_KEY"],
        "sif": "eval-factory_hle_26.03.sif",
    }


def test_json_of_whole_catalogue_round_trips(builtin: Catalogue) -> None:
    items = json.loads(tasks_to_json(builtin.tasks))
    assert len(items) == len(builtin.tasks)
    upstream = next(i for i in items if i["qualified_name"] == "lm-eval-upstream.mmlu")
    assert upstream["image"] is None and upstream["sif"] is None


def test_empty_json_list() -> None:
    assert tasks_to_json([]) == "[]\n"


def test_table(builtin: Catalogue) -> None:
    tasks = builtin.list(harness="tau2_bench") + builtin.list(harness="garak")
    lines = format_task_table(tasks).splitlines()
    assert lines[0].split() == ["NAME", "HARNESS", "TYPE", "GPU", "JUDGE", "DESCRIPTION"]
    assert lines[-1] == "5 tasks in 2 harnesses"
    body = lines[1:-1]
    assert len(body) == 5
    # Columns line up: HARNESS starts at the same offset in every row.
    offset = lines[0].index("HARNESS")
    assert all(line[offset - 2 : offset] == "  " and line[offset] != " " for line in body)
    assert any(line.startswith("garak-completions") for line in body)
    assert all(" no " in line for line in body)


def test_table_marks_tasks_that_need_a_judge(builtin: Catalogue) -> None:
    lines = format_task_table(builtin.list(harness="lm-eval-upstream")).splitlines()
    judge = lines[0].index("JUDGE")
    marks = {line.split()[0]: line[judge:].split()[0] for line in lines[1:-1]}
    assert marks["judged_qa"] == "yes" and marks["mmlu"] == "no"


def test_table_cuts_long_descriptions(builtin: Catalogue) -> None:
    text = format_task_table(builtin.list(harness="codec"))
    assert all(len(line) < 160 for line in text.splitlines())
    assert format_task_table([]).splitlines() == [
        "NAME  HARNESS  TYPE  GPU  JUDGE  DESCRIPTION",
        "0 tasks in 0 harnesses",
    ]
