"""The servers' load (server-load.json, results.server_load) in `status` (the running model's
latest sample, text and --json, also without any runtime.json yet) and `info` (each model's
peaks and means, text and --json); a bad file is unknown with the reason, never a crash."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval import api
from hpceval.cli.main import cli
from hpceval.contract import SERVER_LOAD_FILE, model_dir
from hpceval.results.server_load import LoadSeries, write_server_load
from hpceval.runs.submit import submit_configs

ONE = "ut-harness.ut_one"


def write_load(folder: Path, *, now: float | None = None) -> Path:
    """What the proxy writes after three polls: the last one 3 waiting, 8 running, KV 42 %,
    120.5 generated and 900 prompt tokens/s."""
    series = LoadSeries(5.0)
    t = time.time() if now is None else now
    series.add(t - 10, 1, 4, 0.1, None, None)
    series.add(t - 5, 12, 16, 0.97, 200.0, 1500.0)
    series.add(t, 3, 8, 0.42, 120.5, 900.0)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SERVER_LOAD_FILE
    write_server_load(path, series.to_json())
    return path


@pytest.fixture
def sweep(tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> Path:
    """model-00 running with a load file and no runtime.json yet, model-01 queued."""
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    job = result.job_ids[0]
    fake.states[f"{job}_0"], fake.states[f"{job}_1"] = "RUNNING", "PENDING"
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    write_load(model_dir(result.run_dir, "model-00"))
    return result.run_dir


def test_status_shows_the_running_model_s_latest_sample(sweep: Path) -> None:
    out = CliRunner().invoke(cli, ["status", str(sweep)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("model-00"))
    assert lines[row + 1].strip() == ("server: 3 waiting, 8 running, KV cache 42%, "
                                      "120.5 tokens/s out, 900.0 in")
    models = {m["model"]: m for m in json.loads(CliRunner().invoke(
        cli, ["status", str(sweep), "--json"]).output)[0]["models"]}
    server = models["model-00"]["served"]["server"]
    assert (server["waiting"], server["running"], server["kv"]) == (3, 8, 0.42)
    assert server["gen_tps"] == 120.5 and server["age_s"] <= 60
    assert models["model-00"]["served"]["tasks"] == 0
    assert models["model-01"]["served"] is None  # queued


def test_status_says_how_old_a_sample_is_once_the_proxy_stopped_writing(sweep: Path) -> None:
    write_load(model_dir(sweep, "model-00"), now=time.time() - 600)
    out = CliRunner().invoke(cli, ["status", str(sweep), "--no-tasks"]).output
    assert "900.0 in (as of 10 min ago)" in out


def test_the_watch_view_shows_it_in_the_served_column(sweep: Path, fake: FakeSlurm) -> None:
    from rich.console import Console

    from hpceval.cli.track_cmds import _served_texts
    from hpceval.runs.display import rich_states

    found = api.track([str(sweep)], client=fake).refresh(force=True)
    console = Console(record=True, width=250)
    console.print(rich_states([f.state for f in found], None, _served_texts(found)))
    assert "server: 3 waiting, 8 running, KV cache 42%" in console.export_text()


@pytest.mark.parametrize("content, why", [
    (b'{"schema": 1, "la', "server-load.json is not valid JSON (truncated?)"),
    (b"x" * ((1 << 20) + 1), "server-load.json is larger than 1024 KiB"),
    (b'{"schema": 1, "columns": ["t", "waiting", "running", "kv", "gen_tps", "prompt_tps"], '
     b'"interval_s": "fast"}', 'server-load.json has interval_s = "fast", not a number'),
])
def test_a_bad_file_is_unknown_with_the_reason(sweep: Path, content: bytes, why: str) -> None:
    (model_dir(sweep, "model-00") / SERVER_LOAD_FILE).write_bytes(content)
    out = CliRunner().invoke(cli, ["status", str(sweep), "--no-tasks"])
    assert out.exit_code == 0, out.output
    assert f"server: unknown ({why}" in out.output
    served = json.loads(CliRunner().invoke(cli, ["status", str(sweep), "--json"]).output)[0][
        "models"][0]["served"]
    assert served["server"]["unknown"].startswith(why)


def test_a_foreign_file_is_not_read(sweep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = model_dir(sweep, "model-00") / SERVER_LOAD_FILE
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({path.stat().st_uid + 1}))
    out = CliRunner().invoke(cli, ["status", str(sweep), "--no-tasks"]).output
    assert "server: unknown (server-load.json is owned by" in out


def test_info_shows_each_model_s_peaks_and_means(sweep: Path, fake: FakeSlurm) -> None:
    finish_task(sweep, "model-00", ONE)
    (model_dir(sweep, "model-01") / SERVER_LOAD_FILE).write_text("[]")
    out = CliRunner().invoke(cli, ["info", str(sweep)])
    assert out.exit_code == 0, out.output
    lines = [x for x in out.output.splitlines() if x.startswith("server ")]
    assert lines == [
        "server     model-00: waiting peak 12 (mean 5.3), running peak 16 (mean 9.3), KV cache "
        "peak 97% (mean 50%), tokens/s out peak 200.0 (mean 160.2), in peak 1,500.0 (mean "
        "1,200.0); 3 samples every 5 s",
        "server     model-01: unknown: server-load.json is list, not a JSON object"]
    as_json = json.loads(CliRunner().invoke(cli, ["info", str(sweep), "--json"]).output)
    load = as_json["server_load"]
    assert load["model-00"]["summary"]["waiting"] == {"peak": 12, "mean": 5.3}
    assert load["model-00"]["samples"] == 3 and "points" not in load["model-00"]
    assert load["model-01"] == {"unknown": "server-load.json is list, not a JSON object"}


def test_info_of_a_model_without_the_file_says_why(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    out = CliRunner().invoke(cli, ["info", result.invocation_id]).output
    assert "server     solo: no server-load.json (not started yet, a server without " \
           "/metrics" in out
    as_json = json.loads(CliRunner().invoke(cli, ["info", result.invocation_id,
                                                  "--json"]).output)
    assert as_json["server_load"] == {"solo": None}


def test_status_shows_the_load_of_a_judge_served_in_the_model_s_job(sweep: Path) -> None:
    """Issue 36 item 2: a judge's proxy samples its servers too (auxiliary/<judge>/ in the
    model's folder); status shows it after the model's own, text and --json."""
    from hpceval.contract import aux_dir

    write_load(aux_dir(model_dir(sweep, "model-00"), "grader"))
    out = CliRunner().invoke(cli, ["status", str(sweep)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("model-00"))
    assert lines[row + 1].strip().endswith(
        "900.0 in; judge grader's server: 3 waiting, 8 running, KV cache 42%, 120.5 tokens/s "
        "out, 900.0 in"), lines[row + 1]
    models = {m["model"]: m for m in json.loads(CliRunner().invoke(
        cli, ["status", str(sweep), "--json"]).output)[0]["models"]}
    judge = models["model-00"]["served"]["judges"]["grader"]
    assert (judge["waiting"], judge["running"], judge["kv"]) == (3, 8, 0.42)
    # a folder that is not the judge's own (a link) is not read
    other = sweep / "elsewhere"
    write_load(other)
    (model_dir(sweep, "model-00") / "auxiliary" / "linked").symlink_to(other)
    served = json.loads(CliRunner().invoke(cli, ["status", str(sweep), "--json"]).output)[0]
    assert set(served["models"][0]["served"]["judges"]) == {"grader"}


def test_status_shows_the_load_of_a_running_sweep_judge_job(tmp_path: Path, fake: FakeSlurm,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Issue 36 item 2: a sweep's judge job is a server too; its front samples its servers
    into auxiliary/<name>/. status shows the latest sample under the judge's row (text, the
    watch view and --json) while the judge job runs, and reads nothing once it has ended."""
    from rich.console import Console
    from support.runs import submitted

    from hpceval.cli.track_cmds import _served_texts
    from hpceval.contract import aux_dir
    from hpceval.runs.display import rich_states

    result, array, _, judge = submitted(tmp_path, fake)
    fake.states.update({judge: "RUNNING", **{f"{array}_{i}": "PENDING" for i in range(3)}})
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    write_load(aux_dir(result.run_dir, "judge"))
    out = CliRunner().invoke(cli, ["status", str(result.run_dir)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("judge judge"))
    assert lines[row + 1].strip() == ("server: 3 waiting, 8 running, KV cache 42%, "
                                      "120.5 tokens/s out, 900.0 in"), lines
    (run,) = json.loads(CliRunner().invoke(cli, ["status", str(result.run_dir),
                                                 "--json"]).output)
    served = run["judges"][0]["served"]
    assert (served["waiting"], served["running"], served["kv"]) == (3, 8, 0.42)
    (found,) = api.track([str(result.run_dir)]).refresh(force=True)
    console = Console(width=250, record=True)
    console.print(rich_states([found.state], None, _served_texts([found])))  # --watch's
    assert any("judge judge" in line and "server: 3 waiting" in line
               for line in console.export_text().splitlines())
    fake.states[judge] = "COMPLETED"  # ended: its last sample is not "now"
    (run,) = json.loads(CliRunner().invoke(cli, ["status", str(result.run_dir),
                                                 "--json"]).output)
    assert run["judges"][0]["served"] is None
