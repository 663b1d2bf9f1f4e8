"""The result verbs: results, export, compare, gate."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpceval.api._load import RunSource, find, find_watch, is_watch
from hpceval.errors import HpcevalError

if TYPE_CHECKING:
    import pandas as pd

    from hpceval.backends import SchedulerClient
    from hpceval.results.compare import TaskDiff
    from hpceval.results.export import ExportReport
    from hpceval.results.gate import TaskDecision
    from hpceval.runs.cost import BackendOf

STATS_HINT = ("the statistics need scipy (a dependency of hpceval: pip install 'scipy>=1.11' "
              "if this environment lacks it)")


class SideNotFound(HpcevalError):
    """A side of compare/gate names no run, model of a run, watch step or model."""

    exit_code = 2


def run_dirs(runs: Sequence[RunSource] | None = None, *, limit: int = 0,
             output_dirs: Iterable[str | Path] = ()) -> list[Path]:
    """The run directories of RUNs; none given: every known run (only the newest ``limit``
    if set) whose directory exists."""
    from hpceval.runs.index import list_runs

    dirs = list(output_dirs)
    if runs:
        return [find(r, dirs).run_dir for r in runs]
    known = list_runs([Path(d) for d in dirs])
    return [r.run_dir for r in (known[:limit] if limit else known) if r.run_dir.is_dir()]


def results(runs: Sequence[RunSource] | None = None, *, models: Sequence[str] = (),
            tasks: Sequence[str] = (), leaderboard: bool = False,
            metric: str | None = None, limit: int = 0,
            output_dirs: Iterable[str | Path] = (), runtime: bool = False) -> pd.DataFrame:
    """A pandas DataFrame of finished tasks (default: every known run), or the leaderboard
    (one row per model, one column per task's primary metric, or ``metric``). ``runtime``:
    each row also carries what the server did for its task (a ``runtime`` column: its
    runtime.json's facts, None without one, {"unknown": why} for one that cannot be shown;
    results.runtime_view.with_runtime) and how loaded its model's servers were (a
    ``server_load`` column: server-load.json's summary and last sample, alike;
    results.server_load.with_server_load) and where its model's jobs' allocations went (a
    ``ledger`` column: each job's phases and their sums; results.ledger_view.with_ledger);
    not on the leaderboard."""
    from hpceval.results.table import leaderboard as board
    from hpceval.results.table import results_frame

    frame = results_frame(run_dirs(runs, limit=limit, output_dirs=output_dirs),
                          models=models, tasks=tasks)
    if leaderboard:
        return board(frame, metric)
    if runtime:
        from hpceval.results.ledger_view import with_ledger
        from hpceval.results.runtime_view import with_runtime
        from hpceval.results.server_load import with_server_load

        return with_ledger(with_server_load(with_runtime(frame)))
    return frame


def _backends(client: SchedulerClient | None) -> Callable[[], BackendOf]:
    """The backends by run kind, made only when some job's usage is not cached yet (the same
    ones `status` asks)."""
    def make() -> BackendOf:
        from hpceval.runs.state import Tracker

        return Tracker(client).backend

    return make


def cost_of(dirs: Iterable[Path], *, client: SchedulerClient | None = None) -> pd.DataFrame:
    """GPU-hours and node-hours of these run directories: one row per (run, model, task) plus
    an '(all jobs)' row per model (every attempt of its jobs, GPUs x elapsed)."""
    from hpceval.runs.cost import cost_frame

    return cost_frame(list(dirs), _backends(client))


def cost(runs: Sequence[RunSource] | None = None, *, models: Sequence[str] = (),
         tasks: Sequence[str] = (), limit: int = 0, output_dirs: Iterable[str | Path] = (),
         client: SchedulerClient | None = None) -> pd.DataFrame:
    """`hpceval results --cost`: cost_of RUNs (default: every known run), only ``models`` and
    ``tasks`` (harness.task or short name) if given; each model's '(all jobs)' row stays."""
    frame = cost_of(run_dirs(runs, limit=limit, output_dirs=output_dirs), client=client)
    if models:
        frame = frame[frame["model"].isin(models)]
    if tasks:
        short = frame["task"].str.rsplit(".", n=1).str[-1]
        frame = frame[frame["task"].isin(tasks) | short.isin(tasks) | (frame["task"] ==
                                                                       "(all jobs)")]
    return frame.reset_index(drop=True)


def write_report(frame: pd.DataFrame, path: str | Path, *, samples: int = 20,
                 client: SchedulerClient | None = None) -> Path:
    """The static HTML report of a results frame (what was run, the comparison with 95%
    intervals, GPU-hours, the first ``samples`` answers per task), written atomically."""
    from hpceval.results.report import write_report as write

    dirs = sorted({Path(d) for d in frame["run_dir"]}) if not frame.empty else []
    write(frame, Path(path), run_dirs=dirs, samples=samples, cost=cost_of(dirs, client=client))
    return Path(path)


def watch_points(watch: str | Path, output_dirs: Iterable[str | Path] = ()
                 ) -> list[tuple[int, Path]]:
    """(step, run directory) of each checkpoint a watch submitted, in step order."""
    from hpceval.watch.control import submitted_points

    return submitted_points(find_watch(watch, output_dirs))


def write_step_report(table: pd.DataFrame, path: str | Path, title: str, *,
                      metric: str | None = None, cost: bool = True,
                      cost_dirs: Iterable[Path] | None = None,
                      client: SchedulerClient | None = None) -> Path:
    """The score-vs-step HTML page of a step table (watch_steps), with the GPU-hours of the
    table's runs (or of ``cost_dirs``: every run of the watch) unless ``cost`` is False (then
    no scheduler call)."""
    from hpceval.results.report import write_step_report as write

    dirs = ([Path(d) for d in dict.fromkeys(table["run_dir"])] if not table.empty else []
            ) if cost_dirs is None else list(cost_dirs)
    write(table, Path(path), title, metric=metric,
          cost=cost_of(dirs, client=client) if cost else None)
    return Path(path)


@dataclass(frozen=True)
class Exported:
    """What an export wrote: local files, or the tracking runs created/updated/unchanged."""

    dest: str  # local | mlflow | wandb
    rows: int  # metric rows exported
    files: tuple[Path, ...] = ()  # dest local: one file per run
    report: ExportReport | None = None  # dest mlflow / wandb


def export(runs: Sequence[RunSource] | None = None, *, dest: str = "local",
           fmt: str = "json", output: str | Path = "hpceval-export",
           tracking_uri: str | None = None, experiment: str = "hpceval", online: bool = False,
           models: Sequence[str] = (), tasks: Sequence[str] = (), limit: int = 0,
           output_dirs: Iterable[str | Path] = ()) -> Exported:
    """Export the results of RUNs (default: every known run); exporting again changes nothing.

    local: one ``fmt`` (json/csv) file per run under ``output``. mlflow / wandb (optional
    extras): one tracking run per (run, model, task), found again by a deterministic key;
    ``experiment`` is the MLflow experiment or W&B project, W&B offline unless ``online``.
    ExportError when the exporter's package is missing or the format unknown."""
    from hpceval.results import export as ex

    frame = results(runs, models=models, tasks=tasks, limit=limit, output_dirs=output_dirs)
    if dest == "local":
        return Exported(dest, len(frame), tuple(ex.export_local(frame, Path(output), fmt)))
    if dest == "mlflow":
        return Exported(dest, len(frame), report=ex.export_mlflow(
            frame, experiment=experiment, tracking_uri=tracking_uri))
    if dest == "wandb":
        return Exported(dest, len(frame), report=ex.export_wandb(
            frame, project=experiment, offline=not online))
    raise ex.ExportError(f"--dest {dest}: give local, mlflow or wandb")


def side(ref: str, output_dirs: Iterable[str | Path] = ()) -> pd.DataFrame:
    """The results of one side of compare/gate: RUN, RUN:MODEL, WATCH:STEP or MODEL (its
    newest finished run per task). SideNotFound (exit 2) when it names nothing finished."""
    from hpceval.results.table import results_frame
    from hpceval.runs.index import RunNotFound, list_runs

    dirs = [Path(d) for d in output_dirs]
    head, sep, tail = ref.rpartition(":")
    if sep and is_watch(head):
        from hpceval.watch.control import submitted_points

        points = dict(submitted_points(find_watch(head, dirs)))
        last = tail.rsplit("_", 1)[-1]
        step = int(last) if last.isdigit() else None
        if step not in points:
            raise SideNotFound(f"{ref}: the watch has no step {tail!r} (steps: "
                               f"{', '.join(map(str, sorted(points))) or 'none yet'})")
        return results_frame([points[step]])
    for run_part, model in ((ref, None), (head, tail) if sep else (None, None)):
        if run_part is None:
            continue
        try:
            run = find(run_part, dirs)
        except RunNotFound:
            continue
        frame = results_frame([run.run_dir], models=[model] if model else ())
        if model is None and frame["model"].nunique() > 1:
            raise SideNotFound(
                f"run {run.invocation_id} has {frame['model'].nunique()} models "
                f"({', '.join(sorted(frame['model'].unique()))}): name one as RUN:MODEL")
        if model is not None and frame.empty:
            raise SideNotFound(f"run {run.invocation_id} has no finished task of "
                               f"model {model!r}")
        return frame
    known = [r.run_dir for r in list_runs(dirs) if r.run_dir.is_dir()]
    frame = results_frame(known, models=[ref])
    if frame.empty:
        raise SideNotFound(f"{ref!r} is no known run (id, prefix or directory), "
                           "RUN:MODEL, WATCH:STEP, or model with finished tasks "
                           "(see `hpceval ls runs`)")
    return frame


def _sides(a: str, b: str, output_dirs: Iterable[str | Path]
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    try:
        import scipy  # noqa: F401
    except ImportError as exc:
        raise HpcevalError(STATS_HINT) from exc
    dirs = list(output_dirs)
    return side(a, dirs), side(b, dirs)


def compare(a: str, b: str, *, tasks: Sequence[str] = (), alpha: float = 0.05,
            output_dirs: Iterable[str | Path] = ()) -> list[TaskDiff]:
    """Per task: A, B, B - A with its interval, p-value (Holm-adjusted across tasks), verdict.

    Paired (McNemar exact for 0/1 scores, else a permutation test) where both sides have
    per-sample files; otherwise each diff's note says it used the marginal numbers."""
    from hpceval.results.compare import compare_frames

    frame_a, frame_b = _sides(a, b, output_dirs)
    return compare_frames(frame_a, frame_b, alpha=alpha, tasks=tasks)


@dataclass(frozen=True)
class GateResult:
    """GO / NO-GO / INCONCLUSIVE overall, each task's decision, and the CLI's exit status."""

    verdict: str
    decisions: tuple[TaskDecision, ...]
    exit_code: int  # 0 GO, 1 NO-GO, 3 INCONCLUSIVE


def gate(policy: str | Path, a: str, b: str, *, tasks: Sequence[str] = (),
         output_dirs: Iterable[str | Path] = ()) -> GateResult:
    """Decide whether candidate B may replace baseline A under a policy file (YAML: alpha,
    max_drop, min_gain, flags: what each flag on B does, per-task overrides). ConfigError
    (exit 2) for a bad policy. Each decision's ``flags`` say what every flag on B did."""
    from hpceval.results.gate import EXIT, load_policy, overall
    from hpceval.results.gate import gate as run_gate

    rules = load_policy(Path(policy))
    frame_a, frame_b = _sides(a, b, output_dirs)
    decisions = run_gate(frame_a, frame_b, rules, tasks)
    verdict = overall(decisions)
    return GateResult(verdict, tuple(decisions), EXIT[verdict])
