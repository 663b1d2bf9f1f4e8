"""The JSON index cache and user catalogues."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpceval.tasks import load_catalogue, loader

USER_FILE = textwrap.dedent(
    """\
    # A custom lm-eval task over a local JSONL file, added without touching the package.
    harness: lm-eval-upstream
    tasks:
      - name: my_jsonl_qa
        endpoint_type: completions
        description: Our private QA set (lm-eval YAML task over a JSONL file)
        params:
          num_fewshot: 0
          extra:
            include_path: /shared/evals/lm_eval_tasks
    """
)


def _forbid_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: Path) -> object:
        raise AssertionError(f"YAML parsed although the index is cached: {path}")

    monkeypatch.setattr(loader, "_parse_yaml", boom)


def test_second_load_uses_the_index_not_the_yaml_parser(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_catalogue()
    index_file = home / "cache" / "hpceval" / "tasks-index.json"
    assert index_file.is_file()
    loader.clear_memory_cache()  # force the on-disk path, not the in-process one
    _forbid_yaml(monkeypatch)
    second = load_catalogue()
    assert [t.qualified_name for t in second.tasks] == [t.qualified_name for t in first.tasks]
    assert second.resolve("ifeval").note == first.resolve("ifeval").note


def test_same_process_reuses_the_index_in_memory(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_catalogue()
    (home / "cache" / "hpceval" / "tasks-index.json").unlink()
    _forbid_yaml(monkeypatch)
    assert len(load_catalogue().tasks) >= 421


def test_user_catalogue_on_tasks_path_adds_a_task_and_invalidates_the_cache(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_dir = home / "site-tasks"
    user_dir.mkdir()
    monkeypatch.setenv(
        "HPCEVAL_TASKS_PATH", os.pathsep.join([str(home / "missing"), str(user_dir)])
    )
    before = load_catalogue()
    with pytest.raises(LookupError):
        before.resolve("my_jsonl_qa")

    (user_dir / "ours.yaml").write_text(USER_FILE)
    loader.clear_memory_cache()
    after = load_catalogue()  # a new file changes the key: rebuilt, not served stale
    res = after.resolve("my_jsonl_qa")
    assert res.task.qualified_name == "lm-eval-upstream.my_jsonl_qa"
    assert res.task.params["extra"]["include_path"] == "/shared/evals/lm_eval_tasks"
    assert res.task.params["parallelism"] == 16  # harness defaults still apply
    assert res.task.source == str(user_dir / "ours.yaml")
    assert len(after.tasks) == len(before.tasks) + 1

    # Editing the file (different size) also invalidates.
    (user_dir / "ours.yaml").write_text(USER_FILE.replace("my_jsonl_qa", "my_jsonl_qa_v2"))
    loader.clear_memory_cache()
    assert load_catalogue().resolve("my_jsonl_qa_v2").task.harness == "lm-eval-upstream"


def test_user_config_dir_and_a_new_harness(home: Path) -> None:
    config_tasks = home / "config" / "hpceval" / "tasks"
    config_tasks.mkdir(parents=True)
    (config_tasks / "inhouse.yml").write_text(
        textwrap.dedent(
            """\
            harness:
              name: inhouse
              description: Our in-house harness image
              image: registry.example.org/evals/inhouse:1.4.2
              sif: inhouse_1.4.2.sif
              parser: eval_factory
              command_from: eval-factory
            tasks:
              - name: support_tickets
                endpoint_type: chat
                description: Answers to anonymised support tickets
                needs_judge: true
                required_env: [JUDGE_API_KEY]
            """
        )
    )
    cat = load_catalogue()
    task = cat.resolve("support_tickets").task
    assert task.qualified_name == "inhouse.support_tickets"
    assert task.sif == "inhouse_1.4.2.sif" and task.needs_judge
    assert "nemo-evaluator run_eval" in cat.harnesses["inhouse"].command


def test_unwritable_cache_dir_falls_back_to_memory(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = home / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    cat = load_catalogue()
    assert len(cat.tasks) >= 421
    _forbid_yaml(monkeypatch)
    assert load_catalogue().resolve("aegis").task.name == "aegis_v2"  # served from memory


def test_corrupt_or_stale_index_is_rebuilt(home: Path) -> None:
    index_file = home / "cache" / "hpceval" / "tasks-index.json"
    index_file.parent.mkdir(parents=True)
    index_file.write_text("{not json")
    assert len(load_catalogue().tasks) >= 421
    assert index_file.read_text().startswith("{")
    loader.clear_memory_cache()
    index_file.write_text('{"format": 1, "key": "stale", "harnesses": [], "tasks": []}')
    assert len(load_catalogue().tasks) >= 421


def test_no_temp_files_left_behind(home: Path) -> None:
    load_catalogue()
    leftovers = [p.name for p in (home / "cache" / "hpceval").iterdir()]
    assert leftovers == ["tasks-index.json"]


def test_libyaml_loader_is_used_when_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yaml = pytest.importorskip("yaml")
    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML built without libyaml")
    seen = []
    real_load = yaml.load

    def spy(stream: str, Loader: type) -> object:
        seen.append(Loader)
        return real_load(stream, Loader=Loader)

    monkeypatch.setattr(yaml, "load", spy)
    f = tmp_path / "x.yaml"
    f.write_text("a: 1\n")
    assert loader._parse_yaml(f) == {"a": 1}
    assert seen == [yaml.CSafeLoader]


def test_warm_load_imports_neither_yaml_nor_jinja(home: Path) -> None:
    load_catalogue()  # builds the on-disk index
    code = (
        "import sys\n"
        "from hpceval.tasks import load_catalogue, format_task_table\n"
        "heavy = {'yaml', 'jinja2', 'pandas'}\n"
        "assert not heavy & set(sys.modules), 'import'\n"
        "format_task_table(load_catalogue().list())\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
