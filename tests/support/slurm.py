"""The one recording SlurmClient double of the tests: counts every call; job states, exit
codes and owners are set by the test; a job's comment is its script's, as sbatch reads it.
RecordedSlurm is the same double answering sacct with output recorded on the dev cluster."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hpceval.backends.slurm.client import SlurmError
from hpceval.backends.slurm.records import (
    DEFAULT_MAX_ARRAY_SIZE,
    JobRecord,
    QueueEntry,
    base_job_id,
    parse_sacct,
)
from support import TESTS

__all__ = ["FakeSlurm", "RecordedSlurm"]

# sacct output recorded on the dev cluster (tests/backends/slurm/data/sacct-*.txt)
SACCT_SAMPLES = TESTS / "backends" / "slurm" / "data"


class FakeSlurm:
    """SlurmClient double: counts every call; job states are set by the test."""

    def __init__(self) -> None:
        self._ids = itertools.count(1000)
        self.submits: list[dict[str, Any]] = []
        self.sacct_calls: list[list[str]] = []
        self.cancels: list[list[str]] = []
        self.squeue_calls: list[list[str]] = []
        self.states: dict[str, str] = {}  # job or array-task id -> Slurm state
        self.exit_codes: dict[str, int] = {}
        self.owners: dict[str, int] = {}  # base job id -> uid (squeue %U); default: ours
        # base job id -> its --comment (squeue %k): the submitted script's #SBATCH --comment,
        # read as sbatch reads it ("" without one); a job the test made up has none known
        self.comments: dict[str, str] = {}
        self.sacct_starttimes: list[datetime | None] = []  # each sacct call's -S
        self.sacct_failures = 0  # the next N sacct calls fail as with slurmdbd down
        # job or array-task id -> (Elapsed seconds, AllocTRES gres/gpu, node): what it held
        self.usage: dict[str, tuple[int, int, int]] = {}
        self.max_array = DEFAULT_MAX_ARRAY_SIZE  # scontrol show config's MaxArraySize
        self.config_calls = 0  # how often MaxArraySize was asked

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
        job_id = str(next(self._ids))
        self.submits.append({"script": Path(script_path), "extra_args": list(extra_args),
                             "dependency": dependency, "id": job_id,
                             "script_args": list(script_args)})
        if Path(script_path).is_file():
            self.comments[job_id] = header_comment(Path(script_path).read_text())
        return job_id

    def max_array_size(self) -> int:
        self.config_calls += 1
        return self.max_array

    def _record(self, job_id: str, state: str) -> JobRecord:
        code = self.exit_codes.get(job_id, 1 if state == "FAILED" else 0)
        elapsed, gpus, nodes = self.usage.get(job_id, (None, None, None))
        return JobRecord(job_id, state.split()[0], state, code, 0, "None", "node1",
                         elapsed_s=elapsed, alloc_gpus=gpus, alloc_nodes=nodes)

    def sacct(self, job_ids: Sequence[str], *, starttime: datetime | None = None
              ) -> dict[str, JobRecord]:
        self.sacct_calls.append(list(job_ids))
        self.sacct_starttimes.append(starttime)
        if self.sacct_failures:
            self.sacct_failures -= 1
            raise SlurmError(["sacct"], 1, "slurmdbd: Connection refused")
        return self._answer({base_job_id(j) for j in job_ids})

    def _answer(self, bases: set[str]) -> dict[str, JobRecord]:
        return {j: self._record(j, s) for j, s in self.states.items()
                if base_job_id(j) in bases}

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancels.append(list(job_ids))
        bases = {base_job_id(j) for j in job_ids}
        for job_id, state in list(self.states.items()):
            if base_job_id(job_id) in bases and state in ("PENDING", "RUNNING"):
                self.states[job_id] = "CANCELLED by 0"

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
        self.squeue_calls.append(list(job_ids))
        bases = {base_job_id(j) for j in job_ids}
        return {j: QueueEntry(j, s.split()[0], "None", "node1",
                              self.owners.get(base_job_id(j), os.getuid()),
                              self.comments.get(base_job_id(j)))
                for j, s in self.states.items() if base_job_id(j) in bases}


class RecordedSlurm(FakeSlurm):
    """Submits get ids 15, 16, ...; sacct answers from recorded output: a file of
    SACCT_SAMPLES, or `text` (set it again to change what the next call sees)."""

    def __init__(self, sample: str = "sacct-22.05-cost-ended.txt", *,
                 text: str | None = None) -> None:
        super().__init__()
        self._ids = itertools.count(15)
        self.text = (SACCT_SAMPLES / sample).read_text() if text is None else text

    def _answer(self, bases: set[str]) -> dict[str, JobRecord]:
        return {k: r for k, r in parse_sacct(self.text).items() if base_job_id(k) in bases}


def header_comment(script: str) -> str:
    """The --comment of a script's #SBATCH header as sbatch reads it: up to the first unquoted
    whitespace or '#', double quotes grouping, a backslash escaping the next character."""
    comment = ""
    for line in script.splitlines():
        if not line.startswith("#SBATCH --comment="):
            continue
        text, value, quoted, i = line[len("#SBATCH --comment="):], [], False, 0
        while i < len(text) and (quoted or text[i] not in " \t#"):
            if text[i] == "\\" and i + 1 < len(text):
                value.append(text[i + 1])
                i += 2
                continue
            if text[i] == '"':
                quoted = not quoted
            else:
                value.append(text[i])
            i += 1
        comment = "".join(value)  # the last one wins, as with sbatch
    return comment
