"""``hpceval status|info|logs|kill|resume``: follow and steer submitted runs.

RUN is an invocation id, a unique prefix of one, or a run directory of yours (a path: with a
'/', or '.', '..', '~'; a bare word always goes to the registry). Runs are found through the
local index (hpceval.runs.index), which knows every output directory you submitted to and those
in $HPCEVAL_OUTPUT_DIRS; `--output-dir` adds one for this call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hpceval.contract import model_dir

if TYPE_CHECKING:
    from hpceval.api import CancelReport, RunStatus, WatchKill
    from hpceval.runs.index import RunRef

F = TypeVar("F", bound=Callable[..., Any])


def output_dir_option(func: F) -> F:
    decorator = click.option("--output-dir", "output_dirs", multiple=True,
                             type=click.Path(file_okay=False),
                             help="Also look for runs in this output directory.")
    return decorator(func)


def find(ref: str, output_dirs: tuple[str, ...]) -> RunRef:
    from hpceval import api

    return api.find(ref, output_dirs)


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--watch", is_flag=True, help="Refresh until every run ended (progress bars).")
@click.option("--interval", default=5.0, show_default=True,
              help="Seconds between refreshes with --watch (min 2). The run's files are read "
                   "each time; the scheduler is asked at most every 30 s.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=5, show_default=True, help="Recent runs shown without RUN.")
@click.option("--no-tasks", is_flag=True, help="Leave out the per-task lines.")
@output_dir_option
def status(runs: tuple[str, ...], watch: bool, interval: float, as_json: bool, limit: int,
           no_tasks: bool, output_dirs: tuple[str, ...]) -> None:
    """State of runs, their models and tasks, with live request progress, each running job's
    phase (its ledger), the servers' load (queue, KV cache, tokens/s from their /metrics) and
    GPU-hours.

    RUNS may instead be one checkpoint watch (watch-...): its checkpoints and their runs.

    One scheduler call per refresh, whatever the number of runs, models or array tasks. A job
    the scheduler does not list yet is "unknown", never "failed". GPU-hours and node-hours are what
    the jobs held (the scheduler's accounting: GPUs x elapsed), every attempt of a model included.
    """
    from hpceval import api
    from hpceval.runs.display import format_states, rich_states, state_to_dict

    if len(runs) == 1 and api.is_watch(runs[0]) and not watch:
        from hpceval.cli.watch_cmds import show_watch

        show_watch(runs[0], as_json, output_dirs)  # a checkpoint watch: its own view
        return
    if any(api.is_watch(r) for r in runs):
        raise click.UsageError("give one WATCH alone (hpceval status WATCH; no --watch)")
    tracking = api.track(runs, limit=limit, output_dirs=output_dirs)
    if not tracking.refs and not tracking.skipped:
        click.echo("[]" if as_json else "no runs yet (submit one, or pass --output-dir)")
        return
    for ref, why in tracking.skipped:
        click.echo(f"hpceval: skipping run {ref.invocation_id} ({ref.run_dir}): {why}", err=True)
    found = tracking.refresh(force=True)
    states = [f.state for f in found]
    costs = {f.state.ref.run_dir: f.cost for f in found}
    if not watch:
        flags = {(str(s.ref.run_dir), m, t): v for s in states
                 for (m, t), v in api.task_flags(s).items()}
        if as_json:
            click.echo(json.dumps([_with_served(_with_flags(
                {**state_to_dict(f.state), "cost": costs[f.state.ref.run_dir]}, flags),
                f) for f in found], indent=2))
        else:
            texts = {k: [f.text() for f in v] for k, v in flags.items()}
            click.echo(format_states(states, tasks=not no_tasks, costs=costs, flags=texts,
                                     served=_served_texts(found)), nl=False)
        return
    from rich.console import Console
    from rich.live import Live

    with Live(rich_states(states, costs, _served_texts(found)), console=Console(),
              refresh_per_second=2) as live:
        while not all(s.phase.terminal for s in states):
            time.sleep(max(2.0, interval))
            found = tracking.refresh()
            states = [f.state for f in found]
            costs = {f.state.ref.run_dir: f.cost for f in found}
            live.update(rich_states(states, costs, _served_texts(found)))
    # Live leaves its last frame on screen: that is the final state, nothing more to print.


def _with_flags(run: dict[str, Any], flags: dict[tuple[str, str, str], list[Any]]
                ) -> dict[str, Any]:
    """Each task of status --json gets "flags": [{"code", "message"}] (empty when none)."""
    for model in run["models"]:
        for task in model["tasks"]:
            found = flags.get((run["run_dir"], model["model"], task["key"]), [])
            task["flags"] = [{"code": f.code, "message": f.message} for f in found]
    return run


def _with_served(run: dict[str, Any], found: RunStatus) -> dict[str, Any]:
    """Each model of status --json gets "served" (api.Tracking.served's dict; null when it is
    not running or has neither a task's runtime.json nor server-load.json), and each sweep
    judge job "served": its servers' latest load sample (RunStatus.judges; null: none)."""
    for model in run["models"]:
        model["served"] = found.served.get(model["model"])
    for judge in run["judges"]:
        judge["served"] = found.judges.get(judge["name"])
    return run


def _served_texts(found: list[RunStatus]) -> dict[tuple[str, str], str]:
    """(run_dir, model key) -> the running model's live line, and (run_dir, judge row) -> a
    running sweep judge job's servers' load, for the text views."""
    from hpceval.results.runtime_text import live_text, server_now
    from hpceval.runs.display import judge_row

    texts = {(str(f.state.ref.run_dir), key): live_text(served)
             for f in found for key, served in f.served.items()}
    texts.update({(str(f.state.ref.run_dir), judge_row(name)): server_now(sample)
                  for f in found for name, sample in f.judges.items()})
    return texts


@click.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--script", is_flag=True, help="Print the submitted script(s).")
@click.option("--config", "show_config", is_flag=True, help="Print the resolved config.")
@output_dir_option
def info(run: str, as_json: bool, script: bool, show_config: bool,
         output_dirs: tuple[str, ...]) -> None:
    """Paths, job ids (the whole chain), scripts and resolved config of a run, what the
    server did for each task (its runtime.json: requests, latency, tokens; a total per model),
    where each job's allocation went (setup, load, tasks, teardown; GPU-hours; a sweep
    judge's jobs too, with how long each waited for the array; the run's sums by phase) and
    how loaded each model's servers were (server-load.json: peak and mean queue, KV cache
    and tokens/s).
    """
    from hpceval import api
    from hpceval.results.ledger_view import ledger_json
    from hpceval.results.runtime_view import totals

    found = api.info(run, output_dirs=output_dirs)
    ref, manifest, jobs = found.ref, found.run, found.jobs
    if as_json:
        click.echo(json.dumps({"run": manifest.data, "run_dir": str(ref.run_dir),
                               "scripts": [str(s) for s in found.scripts],
                               "config": str(found.config),
                               "jobs": [e.to_json() for e in jobs.chain],
                               "runtime": {key: {
                                   "tasks": {t: r.to_json() for t, r in tasks},
                                   "total": totals(r for _, r in tasks)}
                                   for key, tasks in found.runtime.items()},
                               "server_load": {key: load.to_json()
                                               for key, load in found.server_load.items()},
                               "ledger": {key: ledger_json(*found.ledger[key])
                                          for key in found.ledger},
                               "judge_ledger": {key: ledger_json(*found.judge_ledger[key],
                                                                 judge=True)
                                                for key in found.judge_ledger}},
                              indent=2))
        return
    n = len(manifest.models)
    sweep = f", sweep of {n} models" if manifest.sweep else ""
    click.echo(f"run        {ref.invocation_id} ({manifest.kind}{sweep})")
    click.echo(f"directory  {ref.run_dir}")
    click.echo(f"config     {found.config}")
    for path in found.scripts:
        click.echo(f"script     {path}")
    click.echo(f"submitted  {time.ctime(manifest.created_at)} by {manifest.user or '?'}"
               f" (hpceval {manifest.data.get('hpceval_version')})")
    for e in jobs.chain:
        tasks = (f" array tasks {','.join(str(e.element(m)) for m in e.models)}"
                 + (f" (models from {e.offset})" if e.offset else "") if e.array else "")
        extra = f" pid {e.pid} on {e.host}" if e.pid is not None else ""
        gone = " (cancelled)" if e.cancelled_at else ""
        role = f"{e.role} {e.aux}" if e.aux else e.role  # a sweep's judge: its name
        click.echo(f"job        {e.id} {role} ({e.reason}, {time.ctime(e.submitted_at)})"
                   f"{tasks}{extra}{gone}")
    for m in manifest.models:
        click.echo(f"model      {m.key}: {model_dir(ref.run_dir, m.key)} "
                   f"({len(m.tasks)} tasks: {', '.join(t.task for t in m.tasks)})")
        for job, seconds in found.loads[m.key]:
            click.echo(f"load       {m.key}: servers healthy {seconds} s after job {job} "
                       "started")
    _echo_runtime(manifest.models, found.runtime)
    _echo_load(manifest.models, found.server_load)
    _echo_ledger(found.ledger, found.judge_ledger)
    if script:
        for path in found.scripts:
            click.echo(f"\n# ===== {path.relative_to(ref.run_dir)} =====")
            click.echo(path.read_text(), nl=False)
    if show_config:
        click.echo(f"\n# ===== {found.config.name} =====")
        click.echo(found.config.read_text(), nl=False)


def _echo_ledger(ledger: dict[str, tuple[list[Any], str | None]],
                 judges: dict[str, tuple[list[Any], str | None]]) -> None:
    """Where each job's allocation went (results.ledger): one line per job (a sweep judge's
    jobs after the models'), then the run's sums over every job."""
    from hpceval.results.ledger import ledger_line, sum_ledgers
    from hpceval.results.ledger_view import totals_line

    for key, (jobs, why) in [*ledger.items(), *judges.items()]:
        if why is not None:
            click.echo(f"ledger     {key}: unknown: {why}")
        for job in jobs:
            click.echo(f"ledger     {key} {ledger_line(job)}")
    total = sum_ledgers(ledger.values(), judges.values())
    if total["jobs"]:
        click.echo(f"ledger     run total: {totals_line(total)}")


def _echo_runtime(models: Any, runtime: dict[str, tuple[tuple[str, Any], ...]]) -> None:
    """What the server did (each task's runtime.json): one line per task, a total per model."""
    from hpceval.results.runtime_text import task_line, total_line
    from hpceval.results.runtime_view import totals

    for m in models:
        tasks = runtime.get(m.key, ())
        names = {t.key: t.task for t in m.tasks}
        for key, found in tasks:
            click.echo(f"runtime    {m.key} {names.get(key, key)}: {task_line(found)}")
        if tasks:
            click.echo(f"runtime    {m.key} total: {total_line(totals(r for _, r in tasks))}")


def _echo_load(models: Any, loads: dict[str, Any]) -> None:
    """How loaded each model's servers were (its server-load.json): one line per model, then
    one per judge that sampled its own."""
    from hpceval.results.runtime_text import load_line

    keys = [m.key for m in models]
    for key in [*(k for k in keys if k in loads), *(k for k in loads if k not in keys)]:
        click.echo(f"server     {key}: {load_line(loads[key])}")


@click.command()
@click.argument("run")
@click.option("--model", help="Only this model (its key or model id).")
@click.option("--task", help="The harness log of this task (harness.task or short name).")
@click.option("--server", is_flag=True,
              help="Server and proxy logs (the judges' too) instead of the job log; a sweep's "
                   "judge job's logs come after the models'.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the run ends.")
@click.option("-n", "--lines", type=int, help="Only the last N lines of each log.")
@output_dir_option
def logs(run: str, model: str | None, task: str | None, server: bool, follow: bool,
         lines: int | None, output_dirs: tuple[str, ...]) -> None:
    """Job, server and harness logs of a run (the newest job of each model)."""
    from hpceval import api

    selected = api.logs(run, model=model, task=task, server=server, output_dirs=output_dirs)
    if not selected.files:
        raise click.ClickException("no logs found for that selection yet")
    # following: at most one scheduler query per 5 s; Ctrl-C ends it, not an error
    api.print_logs(selected, tail=None if follow else lines, follow=follow)


@click.command()
@click.argument("run")
@output_dir_option
def kill(run: str, output_dirs: tuple[str, ...]) -> None:
    """Cancel every job of a run (array, successors, aggregation), then verify.

    A checkpoint watch (watch-...): stop it and cancel every evaluation it submitted."""
    from hpceval import api

    if api.is_watch(run):
        _say_watch_killed(api.kill_watch(run, output_dirs=output_dirs))
        return
    ref = find(run, output_dirs)
    report: CancelReport = api.kill(ref)
    _say_skipped(ref.invocation_id, report)
    if not report.cancelled:
        click.echo(f"{ref.invocation_id}: no job to cancel")
        return
    click.echo(f"{ref.invocation_id}: cancelled {', '.join(report.cancelled)}")
    if report.still_active:
        raise click.ClickException("still queued or running after the cancel: "
                                   + ", ".join(report.still_active))
    click.echo("verified: nothing of this run is queued or running")


def _say_skipped(what: str, report: CancelReport) -> None:
    from hpceval.trust import owner_name

    for job_id, uid in sorted(report.skipped.items()):
        click.echo(f"{what}: skipped job {job_id}: owned by {owner_name(uid)}, not by you "
                   "(not cancelled)", err=True)
    for job_id, comment in sorted(report.foreign.items()):
        click.echo(f"{what}: skipped job {job_id}: its comment {comment!r} does not carry this "
                   "run's id, so it is not one of this run's jobs (not cancelled; if it is, "
                   "cancel it with the scheduler's own command)", err=True)


def _say_watch_killed(done: WatchKill) -> None:
    ticks = done.ticks
    click.echo(f"{done.watch_dir.name}: stopped" + (f"; cancelled tick job(s) {', '.join(ticks)}"
                                                    if ticks else ""))
    for run_dir, report in done.runs:
        _say_skipped(run_dir.name, report)
        if report.cancelled:
            click.echo(f"{run_dir.name}: cancelled {', '.join(report.cancelled)}")
    if done.still_active:
        raise click.ClickException("still queued or running after the cancel: "
                                   + ", ".join(done.still_active))
    click.echo("verified: nothing of this watch is queued or running")


@click.command()
@click.argument("run")
@click.option("--force", is_flag=True, help="Resubmit even if the scheduler shows live jobs.")
@click.option("--no-aggregate", is_flag=True,
              help="Sweeps: no dependent aggregation job (kept with a scope: sweep judge: "
                   "it ends the judge).")
@output_dir_option
def resume(run: str, force: bool, no_aggregate: bool, output_dirs: tuple[str, ...]) -> None:
    """Resubmit only the unfinished models of a run (done tasks are skipped in the job)."""
    from hpceval import api

    ref = find(run, output_dirs)
    entries = api.resume(ref, force=force, aggregate=not no_aggregate)
    # several main jobs: a sweep beyond the scheduler's array limit, one array per part
    mains = [e for e in entries if e.role == "main"]
    aggregation = [e.id for e in entries if e.role == "aggregate"]
    pulls = [e.id for e in entries if e.role == "pull"]
    resumed = "; ".join(f"{e.kind} job {e.id} (model indices {', '.join(map(str, e.models))})"
                        for e in mains)
    click.echo(f"{ref.invocation_id}: resumed as {resumed}"
               + (f"; aggregation job {aggregation[0]}" if aggregation else "")
               + (f"; after pull job {pulls[0]} (a server image is missing)" if pulls else ""))
