"""Malformed catalogue files fail with the file and the key path in the message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hpceval.tasks import CatalogueError
from hpceval.tasks.loader import build_index, catalogue_files

GOOD_HARNESS = """\
harness:
  name: inhouse
  description: In-house harness
  image: registry.example.org/evals/inhouse:1.0
  sif: inhouse_1.0.sif
  parser: eval_factory
  command_from: eval-factory
"""


def _build(tmp_path: Path, text: str) -> None:
    f = tmp_path / "user.yaml"
    f.write_text(textwrap.dedent(text))
    build_index(catalogue_files([f]))


def _tasks(*lines: str, harness: str = GOOD_HARNESS) -> str:
    return harness + "tasks:\n" + "".join(f"  - {{{line}}}\n" for line in lines)


T1 = "name: t1, endpoint_type: chat, description: d"
ADD_TO_SE = "harness: simple_evals\n"


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        (_tasks("name: t1, endpoint_type: chatt, description: d"), "tasks[0].endpoint_type",
         "expected one of chat, completions, vlm, embedding"),
        (_tasks(T1 + ", needs_gpus: true"), "tasks[0].needs_gpus", "unknown key"),
        (_tasks("name: t1, endpoint_type: chat"), "tasks[0].description", "required"),
        (_tasks(T1 + ", params: {limit: 5}"), "tasks[0].params.limit", "unknown key"),
        (_tasks(T1 + ", params: {parallelism: many}"), "tasks[0].params.parallelism",
         "expected a number"),
        (_tasks(T1, T1), "tasks[1].name", "duplicate task"),
        (GOOD_HARNESS.replace("inhouse:1.0", "inhouse"), "harness.image", "pin a tag or digest"),
        (GOOD_HARNESS.replace("command_from: eval-factory", "command_from: nope"),
         "harness.command_from", "no template 'nope'"),
        (GOOD_HARNESS.replace("command_from: eval-factory", "command: 'run {{ x | q '"),
         "harness.command", "Jinja syntax error"),
        (GOOD_HARNESS.replace("name: inhouse", "name: in.house"), "harness.name",
         "invalid harness name"),
        (GOOD_HARNESS.replace("name: inhouse", "name: simple_evals"), "harness.name",
         "already defined"),
        (_tasks(T1, harness=""), "harness", "required"),
        (_tasks(T1, harness="harness: no-such-harness\n"), "harness", "unknown harness"),
        (_tasks("name: mmlu, endpoint_type: chat, description: d", harness=ADD_TO_SE),
         "tasks[0].name", "simple_evals.mmlu already defined"),
        (_tasks(T1 + ", aliases: [ifeval]", harness=ADD_TO_SE), "simple_evals.t1.aliases",
         "already a task name"),
        (_tasks(T1 + ", aliases: [aegis]", harness=ADD_TO_SE), "simple_evals.t1.aliases",
         "already names safety_eval.aegis_v2"),
        (_tasks("name: ifeval, endpoint_type: chat, description: d, canonical: true",
                harness=ADD_TO_SE), "simple_evals.ifeval.canonical",
         "lm-evaluation-harness.ifeval is already canonical"),
        ("schema: 2\n", "schema", "unsupported schema"),
        ("harness: [\n", "line", "YAML syntax error"),
        ("", "", "file is empty"),
    ],
)  # fmt: skip
def test_bad_files_name_file_and_key(tmp_path: Path, text: str, path: str, message: str) -> None:
    with pytest.raises(CatalogueError) as err:
        _build(tmp_path, text)
    text_of_error = str(err.value)
    assert text_of_error.startswith(str(tmp_path / "user.yaml")), text_of_error
    assert path in text_of_error and message in text_of_error, text_of_error


def test_host_harness_needs_no_image(tmp_path: Path) -> None:
    _build(
        tmp_path,
        """\
        harness:
          name: local-script
          description: A script on the login node
          runtime: host
          parser: lm_eval
          command: "python score.py --task {{ task.task_id | q }}"
        tasks:
          - {name: t1, endpoint_type: chat, description: d}
        """,
    )
