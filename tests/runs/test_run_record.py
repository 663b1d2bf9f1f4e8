"""run.json has one reader (hpceval.records.read_run) and one error; the tree one set of paths.

Before, status/info/logs/kill, the job chain, the results table and the cost table each read
run.json themselves: a damaged file was a JSONDecodeError traceback in one, a KeyError in
another, an empty run in a third. Now every one of them gets a RunRecord or a RunFileError
that names the file and the fix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval import contract
from hpceval.backends.base import JobEntry
from hpceval.cli.main import cli
from hpceval.errors import HpcevalError
from hpceval.records import (
    RUN_SCHEMA,
    AuxRecord,
    ModelRecord,
    Reason,
    Role,
    RunFileError,
    RunRecord,
    TaskRecord,
    read_run,
    write_run_record,
)
from hpceval.runs.jobs import append_jobs, read_jobs
from hpceval.runs.submit import submit_configs


def test_the_record_is_what_submit_wrote(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    raw = json.loads((result.run_dir / contract.RUN_FILE).read_text())
    run = read_run(result.run_dir)
    assert run.invocation_id == raw["invocation_id"] == result.invocation_id
    assert run.kind == raw["kind"] and run.sweep is raw["sweep"] and run.entry == raw["entry"]
    assert [(m.key, m.index, m.script) for m in run.models] == [
        (m["key"], m["index"], m["script"]) for m in raw["models"]]
    assert [(t.key, t.task) for t in run.models[0].tasks] == [
        (t["key"], t["task"]) for t in raw["models"][0]["tasks"]]
    assert run.scripts_sha256 == raw["scripts_sha256"] and run.data == raw
    # the file is the record's own form: what it writes is what it reads back
    assert run.to_json() == raw and RunRecord.from_json(run.to_json()) == run
    # the tree the record names is the tree submit made
    folder = contract.model_dir(result.run_dir, run.models[0].key)
    assert (folder / contract.CONFIG_FILE).is_file()


@pytest.mark.parametrize(("text", "says"), [
    (None, "no such file"),
    ("{", "not valid JSON"),
    ("[1, 2]", "not a run record"),
    ('{"invocation_id": "x", "models": [{"index": 0}]}', "no 'key'"),
    ('{"invocation_id": "x", "models": [{"key": "m", "tasks": []}]}', "no 'index'"),
    ('{"invocation_id": "x", "models": [{"key": "m", "index": "zero"}]}', "not a run record"),
])
def test_one_error_names_the_file_and_the_fix(tmp_path: Path, text: str | None,
                                              says: str) -> None:
    if text is not None:
        (tmp_path / contract.RUN_FILE).write_text(text)
    with pytest.raises(RunFileError) as caught:
        read_run(tmp_path)
    assert isinstance(caught.value, HpcevalError) and caught.value.exit_code == 1
    assert caught.value.message.startswith(f"{tmp_path / contract.RUN_FILE}: ")
    assert says in caught.value.message and "submit" in caught.value.fix


@pytest.mark.parametrize("command", ["info", "status", "logs"])
def test_every_command_reports_a_damaged_run_file_the_same_way(tmp_path: Path,
                                                               command: str) -> None:
    # before: a JSONDecodeError traceback (info, logs) or a skipped run (status)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / contract.RUN_FILE).write_text("{")
    got = CliRunner().invoke(cli, [command, str(run_dir)])
    assert got.exit_code != 0
    assert f"{run_dir / contract.RUN_FILE}: not valid JSON" in got.output
    assert "fix: give the directory of a run hpceval submitted" in got.output
    assert "Traceback" not in got.output


def test_readers_that_tolerate_a_missing_run_file_see_the_same_error(tmp_path: Path) -> None:
    from hpceval.results.table import run_rows
    from hpceval.runs.cost import cost_frame

    (tmp_path / contract.RUN_FILE).write_text("{")
    assert run_rows(tmp_path) == []  # no finished task on disk: no rows, no traceback
    assert cost_frame([tmp_path], lambda: pytest.fail("nothing to ask sacct")).empty
    append_jobs(tmp_path, "slurm", [JobEntry("7", "slurm", Role.MAIN, (0,), False, 1.0)])
    (tmp_path / contract.SUCCESSORS_FILE).write_text("8\n")
    assert read_jobs(tmp_path).ids == ["7", "8"]  # the run's own successors still count


def test_roles_and_reasons_are_enums_written_as_their_words(tmp_path: Path) -> None:
    append_jobs(tmp_path, "local", [JobEntry("local-1", "local", Role.JUDGE, (), False, 1.0,
                                             Reason.AUTO_RESUME, aux="judge")])
    written = json.loads((tmp_path / contract.JOBS_FILE).read_text())["chain"][0]
    assert (written["role"], written["reason"]) == ("judge", "auto-resume")
    (entry,) = read_jobs(tmp_path).chain
    assert entry.role is Role.JUDGE and entry.reason is Reason.AUTO_RESUME
    assert f"{entry.role} ({entry.reason})" == "judge (auto-resume)"  # as `info` prints it
    with pytest.raises(ValueError, match="'boss'"):
        JobEntry.from_json({**written, "role": "boss"})


def test_the_tree_is_named_by_functions_for_text_and_paths() -> None:
    text = contract.task_dir("/out/run", "m", "t")
    path = contract.task_dir(Path("/out/run"), "m", "t")
    assert text == str(path) == "/out/run/models/m/tasks/t" and isinstance(path, Path)
    assert contract.tasks_dir("/r", "m") == "/r/models/m/tasks"
    assert contract.model_dir(Path("/r"), "m") == Path("/r/models/m")
    assert contract.aux_dir("/r", "j") == "/r/auxiliary/j" == f"/r/{contract.aux_folder('j')}"
    assert contract.element_script("m") == "models/m/job.sh"
    assert contract.run_dir_of_task(path) == Path("/out/run")
    assert contract.run_dir_of_task(Path("/t")) is None


def test_run_json_has_one_writer(tmp_path: Path) -> None:
    # before: submit wrote a dict of its own (rundir.run_manifest), the aggregation benchmark
    # another; now both build a RunRecord and records.write_run_record writes it, atomically
    run = RunRecord("inv-1", (ModelRecord("m", 0, (TaskRecord("t", "gsm8k"),), "job.sbatch",
                                          "vllm", "m-id", {"instances": 1}),),
                    kind="slurm", entry="job.sbatch", created_at=5.0, user="u",
                    umask="0027", output_dir=str(tmp_path), jobs_tagged=True,
                    auxiliary=(AuxRecord("judge", "auxiliary/judge/judge.sbatch"),))
    write_run_record(tmp_path, run)
    assert [p.name for p in tmp_path.iterdir()] == [contract.RUN_FILE]  # no temporary left
    back = read_run(tmp_path)
    assert back == run and back.data == run.to_json()
    assert back.data["schema"] == RUN_SCHEMA and back.data["models"][0]["layout"] == {
        "instances": 1}
    root = Path(__file__).parents[2]
    writers = [f"{p.relative_to(root)}:{n}" for base in ("hpceval", "benchmarks", "scripts")
               for p in (root / base).rglob("*.py") if p.name != "records.py"
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"write\w*\(.*(RUN_FILE|run\.json)", line)]
    assert writers == []


def test_a_record_can_be_built_in_code() -> None:
    run = RunRecord.from_json({"invocation_id": "x", "models": [{"key": "m", "index": 0}],
                               "auxiliary": [{"name": "j", "script": "s"}]})
    assert run.judge_names == ["j"] and run.models[0].tasks == () and run.kind == ""
    assert RunRecord.from_json({}, Path("/out/20261202-1/run.json")).invocation_id == "20261202-1"


def test_progress_is_a_record_with_one_reader(tmp_path: Path) -> None:
    from hpceval.runs.progress import Progress, format_progress, read_progress

    path = tmp_path / contract.PROGRESS_FILE
    assert read_progress(tmp_path) is None  # no proxy (an external endpoint): no counts
    path.write_text(json.dumps({"requests": {"done": 7, "failed": 1, "expected": 10},
                                "rate_per_s": 2.0, "eta_s": 1.5}))
    got = read_progress(tmp_path)
    assert isinstance(got, Progress) and (got.done, got.failed, got.expected) == (7, 1, 10)
    assert got.as_dict()["done"] == 7 and not got.stale  # status --json: the same keys
    assert format_progress(got) == "7/10 (1 failed), 2.0/s, ETA 1s"
    # a file of another shape is no counts, not a traceback in `status` (it was AttributeError)
    path.write_text(json.dumps({"requests": [1, 2]}))
    assert read_progress(tmp_path) is None


def test_one_is_done_for_text_and_paths(tmp_path: Path) -> None:
    # the results table, the cost table and the report asked os.path.isfile themselves
    assert not contract.is_done(tmp_path) and not contract.is_done(str(tmp_path))
    (tmp_path / contract.DONE_MARKER).write_text("")
    assert contract.is_done(tmp_path) and contract.is_done(str(tmp_path))
