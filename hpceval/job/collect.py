"""`python -m hpceval.job collect`: turn one finished harness run into the task's final results.

The job script calls it after each harness (``--task-dir "$TASK_DIR" --exit-code "$rc"``):

* task already done (``done`` marker): nothing is touched; exit 0. A requeued or duplicate job
  must never replace results that were complete.
* harness exited 0: parse ``DIR/harness/`` with the harness's registered parser, then
  ``finalize_task`` writes ``results.json``, ``manifest.json`` and, last, ``done``. A
  ``failed.json`` left by an earlier attempt is removed once ``done`` exists (its content is
  kept in the manifest as ``previous_failure``).
* more requests failed on the infrastructure (the in-job proxy's count in ``runtime.json``) than
  ``--infra-errors-allowed``: the harness scored them as answers, so ``failed.json`` instead of
  a lowered score; exit 1. Resume runs the task again, its answered requests from the cache.
* harness failed, or its output does not parse: ``DIR/failed.json`` (atomic) says why; exit 1.
  A harness failure's reason names its log, and with ``--timeout`` (the task's, which the job
  script passes) tells a harness stopped by ``timeout`` from one that failed on its own.

The task, harness and parser default to what the catalogue says for the task directory's name
(the job script names it after the task's ``harness.task``), so the job script needs to pass
neither. Exit status: 0 collected or already done, 1 failure recorded, 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpceval import jobenv
from hpceval.contract import COMMAND_FILE, FAILED_FILE, HARNESS_LOG, RUNTIME_FILE, is_done
from hpceval.job import manifest as mf
from hpceval.results.runtime_text import infra_errors
from hpceval.results.runtime_view import load_runtime
from hpceval.results.store import ResultsAlreadyFinal, finalize_task
from hpceval.storage import atomic_write_json, read_json_object
from hpceval.tasks import HarnessDef, TaskDef
from hpceval.tasks.result import TaskResult

HARNESS_DIR = "harness"
TIMEOUT_CODES = {124: "timed out (timeout sent SIGTERM)", 137: "killed (SIGKILL, timeout or OOM)"}
_DUPLICATE_SUFFIX = re.compile(r"-\d+$")  # the job script's key for a task listed twice


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpceval.job collect",
        description="Parse a finished harness run into results.json + manifest.json + done, "
                    "or record failed.json.")
    p.add_argument("--task-dir", type=Path, required=True,
                   help="the task's directory (harness output in DIR/harness)")
    p.add_argument("--exit-code", type=int, required=True, help="the harness's exit status")
    p.add_argument("--task", help="harness.task as in the catalogue (default: the directory name)")
    p.add_argument("--harness", help="harness name (default: the catalogue's for the task)")
    p.add_argument("--parser", help="results parser (default: the harness's `parser:`)")
    p.add_argument("--timeout", type=int, metavar="SECONDS",
                   help="the task's timeout (0: none); statuses 124/137 then say it timed out")
    p.add_argument("--infra-errors-allowed", type=int, default=0, metavar="N",
                   help="requests that may have failed on the infrastructure (the in-job "
                        f"proxy's count, in DIR/{RUNTIME_FILE}) with the task still scored; "
                        "more, and it fails as an infrastructure failure (default 0)")
    p.add_argument("--started-at", metavar="TIME",
                   help="harness start, epoch seconds or ISO 8601 (default: mtime of "
                        f"DIR/{COMMAND_FILE}, written just before the harness starts)")
    p.add_argument("--job-id", "--slurm-job-id", dest="job_id",
                   help=f"the scheduler's job id (default: ${jobenv.JOB_ID})")
    p.add_argument("--node-list", help=f"the job's nodes (default: ${jobenv.NODELIST})")
    return p


@dataclass(frozen=True)
class Target:
    """The task a directory holds, as far as it could be resolved."""

    name: str
    task: TaskDef | None
    harness: HarnessDef | None
    harness_name: str | None
    parser: str | None
    errors: tuple[str, ...] = ()


def resolve(task_dir: Path, task: str | None, harness: str | None,
            parser: str | None) -> Target:
    """Look the task up in the catalogue; explicit options win over what it says."""
    names = [task] if task else [task_dir.name]
    if not task and _DUPLICATE_SUFFIX.search(task_dir.name):
        names.append(_DUPLICATE_SUFFIX.sub("", task_dir.name))
    errors: list[str] = []
    try:
        from hpceval.tasks import TaskLookupError, load_catalogue

        catalogue = load_catalogue()
        # listed names first; only then an unlisted harness.task (run with allow_unlisted),
        # which would otherwise swallow the "-2" of a task listed twice
        for name, unlisted in [*((n, False) for n in names), (names[0], True)]:
            try:
                found = catalogue.resolve(name, allow_unlisted=unlisted).task
            except TaskLookupError as exc:
                errors.append(str(exc))
                continue
            hdef = catalogue.harness(found.harness)
            # Found: earlier misses (a listed lookup before the unlisted one) are not errors.
            return Target(found.qualified_name, found, hdef, harness or hdef.name,
                          parser or hdef.parser, ())
    except Exception as exc:  # a broken user catalogue must not hide the harness's results
        errors.append(f"catalogue: {type(exc).__name__}: {exc}")
    return Target(names[0], None, None, harness, parser, tuple(errors))


def harness_failure(code: int, timeout: int | None) -> str:
    """Why a harness failed, from its exit status as `timeout --kill-after` reports it."""
    if timeout:  # coreutils timeout: 124 after SIGTERM, 137 when it had to send SIGKILL
        if code == 124:
            return f"harness timed out after {timeout} s (stopped with SIGTERM)"
        if code == 137:
            return (f"harness killed with SIGKILL: it outlived its {timeout} s timeout by the "
                    "grace period, or ran out of memory")
    why = TIMEOUT_CODES.get(code, "") if timeout is None else ""
    return f"harness exited with status {code}" + (f": {why}" if why else "")


def _summary(result: TaskResult, limit: int = 8) -> str:
    parts = [f"{m.task}:{m.name}" + (f",{m.filter}" if m.filter else "") + f"={m.value:g}"
             for m in result.metrics[:limit]]
    more = len(result.metrics) - limit
    return " ".join(parts) + (f" (+{more} more)" if more > 0 else "")


class Collector:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.task_dir: Path = args.task_dir
        self.end = mf.now()
        self.start = None
        try:
            self.start = mf.started_at(self.task_dir, args.started_at)
        except ValueError:
            print(f"collect: ignoring unreadable --started-at {args.started_at!r}")
        self.slurm = mf.scheduler_facts(args.job_id, args.node_list)
        self.previous = read_json_object(self.task_dir / FAILED_FILE)

    def fail(self, target: Target, stage: str, reason: str) -> int:
        if is_done(self.task_dir):  # finished meanwhile (another job): its results stand
            print(f"collect: {self.task_dir} was completed meanwhile; nothing recorded")
            return 0
        attempts = int((self.previous or {}).get("attempts") or 0) + 1
        record = mf.build_failure(
            task_dir=self.task_dir, task_name=target.name, harness_name=target.harness_name,
            parser=target.parser, stage=stage, reason=reason, exit_code=self.args.exit_code,
            start=self.start, end=self.end, slurm=self.slurm, attempts=attempts,
            errors=target.errors)
        where = f"see {self.task_dir / FAILED_FILE}"
        try:
            atomic_write_json(self.task_dir / FAILED_FILE, record)
        except OSError as exc:  # full or read-only: the job log is all that is left to say it
            where = f"could not record {self.task_dir / FAILED_FILE}: {exc.strerror or exc}"
        print(f"collect: task {target.name} FAILED ({stage}): {reason}; {where}")
        return 1

    def run(self) -> int:
        if is_done(self.task_dir):
            print(f"collect: {self.task_dir} is already done; its results are kept unchanged")
            return 0
        args = self.args
        target = resolve(self.task_dir, args.task, args.harness, args.parser)
        infra, causes = self.infra_errors()
        lost = (f"{infra} request(s) failed on the infrastructure after the in-job proxy's "
                f"retries ({causes})") if infra else ""
        if args.exit_code != 0:
            reason = harness_failure(args.exit_code, args.timeout)
            return self.fail(target, "harness", f"{reason} (log: {self.task_dir / HARNESS_LOG})"
                             + (f"; {lost}" if lost else ""))
        if infra > args.infra_errors_allowed:
            # the harness scored them, most likely as wrong answers: no score rather than a
            # lowered one. Resume asks them again; the answers that came are cached.
            return self.fail(target, "infrastructure",
                             f"{lost}, more than the {args.infra_errors_allowed} allowed "
                             "(evaluation.infra_errors_allowed): the harness scored them as "
                             "answers, so the score is not published; `hpceval resume` asks "
                             "them again")
        if target.parser is None:
            return self.fail(target, "resolve", "no parser known for this task: "
                             + ("; ".join(target.errors) or "pass --parser"))
        try:
            result = self.parse(target)
        except Exception as exc:  # any parser error is this task's failure, not a crash
            return self.fail(target, "parse", f"{type(exc).__name__}: {exc}")
        return self.finalize(target, result)

    def infra_errors(self) -> tuple[int, str]:
        """This attempt's infrastructure failures (count, causes) from the proxy's runtime.json.
        A file older than the harness's start is an earlier job's: this job's proxy writes
        a failure before it sends it, so a file it has not written yet means none (and a
        resumed task must not fail for what its first job lost)."""
        found = load_runtime(str(self.task_dir))
        if found.facts is None or (self.start is not None and found.mtime is not None
                                   and found.mtime < self.start.timestamp()):
            return 0, ""
        return infra_errors(found.facts)

    def parse(self, target: Target) -> TaskResult:
        from hpceval.tasks.adapters import get_parser

        assert target.parser is not None
        parsed = get_parser(target.parser)(self.task_dir / HARNESS_DIR, target.name)
        result = parsed.finite()
        if not result.metrics:
            what = "no finite metrics (NaN or Infinity: " + ", ".join(
                result.extra["non_finite"]) + ")" if parsed.metrics else "no metrics"
            raise ValueError(f"{result.source_file or 'harness output'} holds {what}")
        if target.harness_name and result.harness != target.harness_name:
            # results name the catalogue harness that ran; the parser only knows the format
            result = dataclasses.replace(
                result, harness=target.harness_name,
                extra={**result.extra, "format": result.harness})
        return result

    def finalize(self, target: Target, result: TaskResult) -> int:
        manifest = mf.build_manifest(
            task_dir=self.task_dir, task=target.task, task_name=target.name,
            harness=target.harness, harness_name=target.harness_name, parser=str(target.parser),
            harness_version=result.harness_version, exit_code=self.args.exit_code,
            start=self.start, end=self.end, slurm=self.slurm, metrics=len(result.metrics),
            source_file=result.source_file, previous_failure=self.previous)
        try:
            finalize_task(self.task_dir, result.to_json(), manifest)
        except ResultsAlreadyFinal:
            print(f"collect: {self.task_dir} was completed meanwhile; its results are kept")
            return 0
        except OSError as exc:
            return self.fail(target, "write", f"could not write results into {self.task_dir}: "
                             f"{exc.strerror or exc}")
        # Only now: a failed.json beside a done marker would be stale, and done is what counts.
        (self.task_dir / FAILED_FILE).unlink(missing_ok=True)
        print(f"collect: task {target.name} done, {len(result.metrics)} metrics: "
              f"{_summary(result)}")
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.task_dir.is_dir():
        print(f"collect: no task directory {args.task_dir}", file=sys.stderr)
        return 2
    return Collector(args).run()

