"""A running model's job phase from its ledger (results.ledger) in `status` (text, --json and the
--watch view): one read of the file per running model per refresh, from the same read budget
as runtime.json and server-load.json, no scheduler call added; a ledger that is damaged or not
the user's shows as unknown with the reason, or shows less, never breaks the view."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.runs import configs, ledger_marks
from support.slurm import FakeSlurm

from hpceval import api
from hpceval.cli.main import cli
from hpceval.contract import LEDGER_FILE, model_dir
from hpceval.runs.submit import submit_configs

# a sweep element writes its own job id (SLURM_JOB_ID), not <array>_<n>: the newest counts
RUNNING = ((0, "start"), (10, "launched"), (56, "ready"))


def write_ledger(run_dir: Path, *rows: tuple[float, str], job: str = "5001",
                 ago: float = 300.0) -> Path:
    path = Path(model_dir(run_dir, "model-00")) / LEDGER_FILE
    with path.open("a") as handle:
        handle.write(ledger_marks(*rows, job=job, t0=time.time() - ago))
    return path


@pytest.fixture
def sweep(tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> Path:
    """model-00 running, in its tasks for 244 s after a load of 46 s; model-01 queued; no
    runtime.json, no server-load.json."""
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    job = result.job_ids[0]
    fake.states[f"{job}_0"], fake.states[f"{job}_1"] = "RUNNING", "PENDING"
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    write_ledger(result.run_dir, *RUNNING)
    return result.run_dir


def _served(run_dir: Path) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["status", str(run_dir), "--json"])
    assert out.exit_code == 0, out.output
    return {m["model"]: m["served"] for m in json.loads(out.output)[0]["models"]}


def _line(run_dir: Path) -> str:
    out = CliRunner().invoke(cli, ["status", str(run_dir), "--no-tasks"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("model-00"))
    return lines[row + 1].strip()


def test_status_says_which_phase_the_job_is_in_and_for_how_long(sweep: Path,
                                                                 fake: FakeSlurm) -> None:
    before = len(fake.sacct_calls)
    assert _line(sweep) == "job 5001: tasks for 4 min (load took 46 s)"
    served = _served(sweep)
    ledger = served["model-00"]["ledger"]
    assert (ledger["job_id"], ledger["phase"], ledger["load_s"]) == ("5001", "tasks", 46.0)
    assert 243 <= ledger["phase_s"] <= 250 and 299 <= ledger["total_s"] <= 306
    assert (served["model-00"]["tasks"], served["model-00"]["server"]) == (0, None)
    assert served["model-01"] is None  # queued: its ledger is not read
    assert len(fake.sacct_calls) - before == 2  # one scheduler call per status, files aside


def test_the_newest_job_counts_and_an_ended_one_says_so(sweep: Path) -> None:
    write_ledger(sweep, (0, "start"), (3, "launched"), job="5002", ago=20)  # a resumed job
    assert _line(sweep) == "job 5002: load for 17 s"
    write_ledger(sweep, (4, "ready"), (10, "tasks_done"), (12, "end"), job="5002", ago=20)
    assert _line(sweep) == "job 5002: ended after 12 s"


def test_the_ledger_is_one_read_of_the_same_budget(sweep: Path, fake: FakeSlurm,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from hpceval.results import ledger

    calls: list[tuple[Path, bool]] = []
    real = ledger.read_ledger

    def counted(folder: Path, **kw: Any) -> Any:
        calls.append((folder, kw.get("details", True)))
        return real(folder, **kw)

    monkeypatch.setattr(ledger, "read_ledger", counted)
    tracking = api.track([str(sweep)], client=fake)
    (found,) = tracking.refresh(force=True)
    assert found.served["model-00"]["ledger"]["phase"] == "tasks"
    assert calls == [(Path(model_dir(sweep, "model-00")), False)]  # no manifest, no log read
    # two tasks' runtime.json and the server-load.json come first: three reads leave none
    monkeypatch.setattr("hpceval.api._track.LIVE_READS", 3)
    (found,) = tracking.refresh(force=True)
    assert "model-00" not in found.served and len(calls) == 1


def test_the_watch_view_shows_it_in_the_served_column(sweep: Path, fake: FakeSlurm) -> None:
    from rich.console import Console

    from hpceval.cli.track_cmds import _served_texts
    from hpceval.runs.display import rich_states

    found = api.track([str(sweep)], client=fake).refresh(force=True)
    console = Console(record=True, width=250)
    console.print(rich_states([f.state for f in found], None, _served_texts(found)))
    assert "job 5001: tasks for 4 min (load took 46 s)" in console.export_text()


def test_a_damaged_ledger_shows_what_its_good_lines_say(sweep: Path) -> None:
    path = Path(model_dir(sweep, "model-00")) / LEDGER_FILE
    good = path.read_text()
    path.write_bytes(b"\x00\xff garbage\n5001 nan ready\n" + good.encode() + b"5001 12")
    assert _line(sweep) == "job 5001: tasks for 4 min (load took 46 s)"
    path.write_bytes(b"\x00\xff not a mark at all\n")  # nothing to show: no line, no error
    assert _served(sweep)["model-00"] is None


def test_a_ledger_that_is_not_the_users_is_unknown(sweep: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(model_dir(sweep, "model-00")) / LEDGER_FILE
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({path.stat().st_uid + 1}))
    assert _line(sweep).startswith("ledger: unknown (ledger is owned by")
    assert _served(sweep)["model-00"]["ledger"]["unknown"].startswith("ledger is owned by")


def test_a_linked_ledger_is_unknown(sweep: Path, tmp_path: Path) -> None:
    path = Path(model_dir(sweep, "model-00")) / LEDGER_FILE
    os.replace(path, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", path)
    assert _line(sweep) == "ledger: unknown (ledger is a symbolic link)"
