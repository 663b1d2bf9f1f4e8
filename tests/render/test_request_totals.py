"""Request totals for `hpceval status` (k/n and an ETA): only when every task's count is known
from the catalogue, and only for the tasks a job still has to run."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from render_helpers import DATA, bash_syntax, context, resolve, shellcheck

from hpceval.render import render_job
from hpceval.tasks import Catalogue
from hpceval.tasks.definitions import TaskDef
from hpceval.tasks.loader import build_index

COUNTED = """\
schema: 1
harness:
  name: counted
  description: a host harness whose tasks know their request counts, or not
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: "counted-eval {{ task.task_id | q }}"
tasks:
  - {name: gen_a, endpoint_type: chat, description: "100 items, one request each",
     samples: 100, requests_per_sample: 1}
  - {name: gen_b, endpoint_type: chat, description: "two requests per item, size unknown",
     requests_per_sample: 2}
  - {name: loglik, endpoint_type: completions, description: one request per answer choice}
"""
MODEL = {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
         "runtime": "host", "tensor_parallel_size": 4}


@pytest.mark.parametrize(("limit", "samples", "per", "total"), [
    (None, 100, 1, 100), (10, 100, 1, 10), (500, 100, 1, 100), (10, None, 2, 20),
    (None, None, 2, None), (10, 100, None, None),
])
def test_expected_requests_is_known_or_none(limit: int | None, samples: int | None,
                                            per: int | None, total: int | None) -> None:
    task = TaskDef("t", "h", "t", "chat", "", None, None, samples=samples,
                   requests_per_sample=per)
    assert task.expected_requests(limit) == total


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalogue:
    extra = tmp_path / "catalogue" / "counted.yaml"
    extra.parent.mkdir()
    extra.write_text(COUNTED)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", os.pathsep.join([str(DATA), str(extra.parent)]))
    return Catalogue.from_index(build_index([*sorted(DATA.glob("*.yaml")), extra]))


def _render(catalogue: Catalogue, tmp_path: Path, tasks: list[dict[str, Any]]) -> str:
    # `catalogue` put the counted harness on HPCEVAL_TASKS_PATH: loading resolves against it
    resolved = resolve("slurm", {"evaluation": {"tasks": tasks}, "deployment": MODEL},
                       tmp_path)
    return render_job(resolved, context(resolved))


def test_the_job_passes_the_total_of_its_unfinished_tasks(counted: Catalogue,
                                                          tmp_path: Path) -> None:
    text = _render(counted, tmp_path, [{"name": "gen_a"},
                                       {"name": "gen_b", "params": {"limit_samples": 10}}])
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bash_syntax(script)
    shellcheck([script])
    lines = [ln for ln in text.splitlines() if "EXPECTED_REQUESTS" in ln]
    assert len(lines) == 4 and "--expected-requests" in lines[-1]
    snippet = "\n".join(lines[:-1]) + '\necho "$EXPECTED_REQUESTS"'
    model_dir = tmp_path / "model"

    def total() -> int:
        out = subprocess.run(["bash", "-c", snippet], capture_output=True, text=True,
                             check=True, env={"MODEL_DIR": str(model_dir)})
        return int(out.stdout)

    assert total() == 100 + 10 * 2
    done = model_dir / "tasks" / "counted.gen_a" / "done"
    done.parent.mkdir(parents=True)
    done.touch()  # finished in an earlier job: a resumed job will not send its requests
    assert total() == 20


@pytest.mark.parametrize("tasks", [
    [{"name": "gen_a"}, {"name": "loglik", "params": {"limit_samples": 10}}],
    [{"name": "gen_b"}],  # no limit and no dataset size: the item count is unknown
])
def test_one_unknown_count_means_no_total(counted: Catalogue, tmp_path: Path,
                                          tasks: list[dict[str, Any]]) -> None:
    text = _render(counted, tmp_path, tasks)
    assert not re.search("EXPECTED_REQUESTS|--expected-requests", text)


@pytest.mark.parametrize("value", [0, -1, "10", 1.5, True])
def test_counts_in_the_catalogue_are_whole_numbers(tmp_path: Path, value: Any) -> None:
    from hpceval.tasks.definitions import CatalogueError

    bad = tmp_path / "bad.yaml"
    bad.write_text(COUNTED.replace("samples: 100", f"samples: {value!r}"))
    with pytest.raises(CatalogueError, match=r"tasks\[0\]\.samples: expected a whole number"):
        build_index([bad])
