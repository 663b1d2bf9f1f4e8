"""The run directory's records, typed, each with one reader: run.json and the job roles/reasons.

``hpceval.contract`` names the tree; this module says what its main file holds. run.json is
written once by submit (hpceval.runs.rundir.run_manifest builds the record, `write_run_record`
writes it, atomically) and read by status, resume, kill, logs, info, cost, results and the
report: all of them read it here, through `read_run`, and see the same `RunFileError` (naming
the file and the fix) for a missing or damaged one. It sits just above the bottom layer (it
imports contract, errors and storage only), so backends and every layer above may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hpceval.contract import RUN_FILE
from hpceval.errors import HpcevalError
from hpceval.storage import atomic_write_json

RUN_SCHEMA = 1  # run.json's "schema": what this module writes


class Role(str, Enum):
    """What a job of a run's chain does (jobs.json "role"); compared by runs, cost, watch."""

    MAIN = "main"  # runs the models' tasks (a sweep: the array)
    AGGREGATE = "aggregate"  # a sweep's dependent aggregation job
    EXPORT = "export"  # export.destinations: the dependent export job
    JUDGE = "judge"  # a sweep's own judge job (auxiliary deployment, scope sweep)
    WATCH = "watch"  # a checkpoint watch's tick job
    PULL = "pull"  # the CPU job that pulls the run's unstaged images before its GPU jobs

    def __str__(self) -> str:  # f-strings and click.echo print the word, as before
        return self.value


class Reason(str, Enum):
    """Why a job was submitted (jobs.json "reason")."""

    SUBMIT = "submit"
    RESUME = "resume"
    AUTO_RESUME = "auto-resume"  # a job stopped at its walltime submitted its successor
    TICK = "tick"  # a watch's next tick

    def __str__(self) -> str:
        return self.value


class RunFileError(HpcevalError):
    """run.json is missing, unreadable or not what submit writes."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        super().__init__(f"{path}: {what}",
                         f"give the directory of a run hpceval submitted (it writes {RUN_FILE} "
                         "last); a damaged one cannot be tracked, submit the run again")


@dataclass(frozen=True)
class TaskRecord:
    key: str  # its folder under models/<key>/tasks/
    task: str  # the task's name (harness.task)


@dataclass(frozen=True)
class ModelRecord:
    key: str  # its folder under models/
    index: int  # its array element in a sweep (0 for a single model)
    tasks: tuple[TaskRecord, ...] = ()
    script: str = ""  # its job script, relative to the run directory
    deployment: str = ""  # deployment.type
    model_id: str = ""  # the served model name
    layout: dict[str, Any] | None = None  # config.layout.Layout as a dict (for the report)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "index": self.index, "script": self.script,
                "deployment": self.deployment, "model_id": self.model_id,
                "layout": self.layout,
                "tasks": [{"key": t.key, "task": t.task} for t in self.tasks]}


@dataclass(frozen=True)
class AuxRecord:
    name: str  # a sweep judge (auxiliary deployment, scope sweep)
    script: str  # its job script, relative to the run directory


@dataclass(frozen=True)
class RunRecord:
    """run.json, typed. `data` is the file as read: `info --json` prints it whole."""

    invocation_id: str  # the run directory's name
    models: tuple[ModelRecord, ...] = ()
    kind: str = ""  # the backend that runs it ("" in a run.json from before the field)
    sweep: bool = False
    entry: str = ""  # the script submit handed to the backend
    created_at: float = 0.0
    user: str = ""
    hpceval_version: str = ""
    umask: str | None = None  # execution.umask, octal text
    array_parallelism: int | None = None
    auxiliary: tuple[AuxRecord, ...] = ()
    # script name -> sha256 as submitted: resume refuses one that changed (none: an old run)
    scripts_sha256: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # its jobs carry the run's id in their comment (the header); False in a run.json from
    # before: kill then checks only the jobs' owner
    jobs_tagged: bool = False
    output_dir: str = ""  # the folder the run directory was made in, as submit saw it
    schema: int = RUN_SCHEMA
    # the image files the run's pull job writes (PULL_SCRIPT; none: its jobs pull nothing)
    pulled_images: tuple[str, ...] = ()

    @property
    def judge_names(self) -> list[str]:
        """The sweep judges of the run (scope: sweep), in submit order."""
        return [a.name for a in self.auxiliary]

    @classmethod
    def from_json(cls, data: Any, path: Path = Path(RUN_FILE)) -> RunRecord:
        """The record of a parsed run.json; RunFileError (naming ``path``) for another shape."""
        try:
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            models = tuple(
                ModelRecord(str(m["key"]), int(m["index"]),
                            tuple(TaskRecord(str(t["key"]), str(t["task"]))
                                  for t in m.get("tasks") or ()),
                            str(m.get("script") or ""), str(m.get("deployment") or ""),
                            str(m.get("model_id") or ""), m.get("layout"))
                for m in data.get("models") or ())
            aux = tuple(AuxRecord(str(a["name"]), str(a.get("script") or ""))
                        for a in data.get("auxiliary") or ())
            parallel, umask = data.get("array_parallelism"), data.get("umask")
            digests = {str(k): str(v) for k, v in (data.get("scripts_sha256") or {}).items()}
            # the directory is named after the invocation id (runs.rundir): the same default
            return cls(str(data.get("invocation_id") or path.parent.name), models,
                       str(data.get("kind") or ""), bool(data.get("sweep")),
                       str(data.get("entry") or ""), float(data.get("created_at") or 0.0),
                       str(data.get("user") or ""), str(data.get("hpceval_version") or ""),
                       None if umask is None else str(umask),
                       None if parallel is None else int(parallel), aux, digests, data,
                       jobs_tagged=bool(data.get("jobs_tagged")),
                       output_dir=str(data.get("output_dir") or ""),
                       schema=int(data.get("schema") or RUN_SCHEMA),
                       pulled_images=tuple(str(f) for f in data.get("pulled_images") or ()))
        except KeyError as exc:
            raise RunFileError(path, f"no {exc.args[0]!r} where submit writes one") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise RunFileError(path, f"not a run record ({exc})") from exc


    def to_json(self) -> dict[str, Any]:
        """run.json's content: what from_json reads back into an equal record."""
        return {
            "schema": self.schema, "invocation_id": self.invocation_id, "kind": self.kind,
            "sweep": self.sweep, "entry": self.entry, "created_at": self.created_at,
            "user": self.user, "hpceval_version": self.hpceval_version,
            "output_dir": self.output_dir, "umask": self.umask,
            "scripts_sha256": dict(self.scripts_sha256),
            "array_parallelism": self.array_parallelism, "jobs_tagged": self.jobs_tagged,
            "auxiliary": [{"name": a.name, "script": a.script} for a in self.auxiliary],
            "models": [m.to_json() for m in self.models],
            "pulled_images": list(self.pulled_images),
        }


def write_run_record(run_dir: Path, run: RunRecord) -> None:
    """THE writer of run.json: atomic, so a reader sees the whole file or none."""
    atomic_write_json(Path(run_dir) / RUN_FILE, run.to_json())


def read_json_record(path: Path, error: Callable[[Path, str], Exception],
                     missing: str = "no such file") -> Any:
    """The JSON document of a record file (run.json, a watch's state.json), or ``error(path,
    what)`` saying what is wrong: missing, unreadable, not JSON. Each record's own reader
    checks its fields and names its fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(path, missing) from exc
    except OSError as exc:
        raise error(path, f"cannot be read ({exc.strerror or exc})") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(path, f"not valid JSON ({exc})") from exc


def read_run(run_dir: Path) -> RunRecord:
    """THE reader of run.json: its record, or RunFileError naming the file and the fix."""
    path = Path(run_dir) / RUN_FILE
    data = read_json_record(path, RunFileError, "no such file: not a run directory, or one "
                            "still being written")
    return RunRecord.from_json(data, path)
