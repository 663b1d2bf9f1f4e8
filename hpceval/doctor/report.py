"""The doctor's table: each line ok / warning / problem with its fix, and the exit status."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


# The exit status: any problem is 1; warnings alone are 0 (they are facts to read, not errors).
PROBLEM_EXIT = 1


@dataclass(frozen=True)
class Line:
    where: str  # login | node: which side saw it
    check: str  # what was checked ("partition", "module load cuda/12")
    status: Status
    detail: str  # what was found
    fix: str = ""  # what to change (warnings and problems)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}


@dataclass
class Report:
    lines: list[Line] = field(default_factory=list)
    job_id: str | None = None  # the --on-node job
    job_dir: str | None = None  # the private folder of its script, log and report (kept on error)

    @property
    def status(self) -> Status:
        found = {line.status for line in self.lines}
        for worst in (Status.PROBLEM, Status.WARNING):
            if worst in found:
                return worst
        return Status.OK

    @property
    def exit_code(self) -> int:
        return PROBLEM_EXIT if self.status is Status.PROBLEM else 0

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "exit_code": self.exit_code, "job_id": self.job_id,
                "job_dir": self.job_dir, "lines": [line.to_json() for line in self.lines]}

    def table(self) -> str:
        """One line per check (where, check, status, detail), the fix indented beneath it."""
        width = max((len(line.check) for line in self.lines), default=5)
        out: list[str] = []
        for line in self.lines:
            out.append(f"{line.where:<5}  {line.check:<{width}}  {line.status.value:<7}  "
                       f"{line.detail}")
            if line.fix and line.status is not Status.OK:
                out.append(f"{'':<5}  {'':<{width}}  {'':<7}  fix: {line.fix}")
        counts = {s: sum(line.status is s for line in self.lines) for s in Status}
        out.append(f"{counts[Status.OK]} ok, {counts[Status.WARNING]} warning(s), "
                   f"{counts[Status.PROBLEM]} problem(s)")
        return "\n".join(out)
