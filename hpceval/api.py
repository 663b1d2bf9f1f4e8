"""The Python API: what the CLI does, as functions (docs/controller.md has examples).

    from hpceval.api import submit, status, results, render, evaluate

``hpceval.results`` and ``hpceval.render`` are subpackages, so at the top level these two are
``hpceval.load_results`` and ``hpceval.render_scripts``; the others are ``hpceval.submit``,
``hpceval.status`` and ``hpceval.evaluate``. Everything heavy is imported inside the calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpceval.slurm.client import SlurmClient

ConfigSource = str | Path | Mapping[str, Any] | None


def _configs(config: ConfigSource, overrides: Sequence[str], profile: str | None,
             check_environment: bool) -> list[Any]:
    """A run file path, or a run config as a dict (written to a temporary run file)."""
    from hpceval.config import load_run

    if isinstance(config, Mapping):
        import tempfile

        import yaml

        with tempfile.TemporaryDirectory(prefix="hpceval-api-") as tmp:
            # not named after a profile: profiles are also looked up next to the run file
            path = Path(tmp) / "api-run.yaml"
            path.write_text(yaml.safe_dump(dict(config), sort_keys=False), encoding="utf-8")
            return load_run(path, list(overrides), profile=profile,
                            check_environment=check_environment)
    run_file = Path(config) if config is not None else None
    return load_run(run_file, list(overrides), profile=profile, check_environment=check_environment)


def render(config: ConfigSource, overrides: Sequence[str] = (), *,
           profile: str | None = None) -> dict[str, str]:
    """The scripts submit would write, by path inside the run directory (nothing written)."""
    from hpceval.runs.rundir import prepare_run

    return prepare_run(_configs(config, overrides, profile, False)).scripts


def submit(config: ConfigSource, overrides: Sequence[str] = (), *, profile: str | None = None,
           aggregate: bool = True, client: SlurmClient | None = None) -> Any:
    """Validate, write the run directory and submit (one sbatch; a sweep is one array job).

    Returns ``hpceval.runs.submit.Submitted`` (invocation_id, run_dir, job_ids, kind, models,
    what: how the backend names the main job).
    execution.type local starts the same job on this machine in the background.
    """
    from hpceval.runs.submit import submit_configs

    return submit_configs(_configs(config, overrides, profile, True), client,
                          aggregate=aggregate)


def status(runs: Sequence[str | Path] | None = None, *, limit: int = 5,
           client: SlurmClient | None = None) -> list[dict[str, Any]]:
    """States of runs (ids, prefixes or run dirs; default: the newest `limit`), as dicts.

    One sacct call whatever the number of runs and jobs."""
    from hpceval.runs.index import find_run, list_runs
    from hpceval.runs.state import Tracker
    from hpceval.runs.views import state_to_dict

    refs = [find_run(str(r)) for r in runs] if runs else list_runs()[:limit]
    tracker = Tracker(client)
    for ref in refs:
        tracker.add(ref)
    return [state_to_dict(s) for s in tracker.refresh(force=True)] if refs else []


def results(runs: Sequence[str | Path] | None = None, *, models: Sequence[str] = (),
            tasks: Sequence[str] = (), leaderboard: bool = False,
            metric: str | None = None) -> Any:
    """A pandas DataFrame of finished tasks (default: every known run), or the leaderboard."""
    from hpceval.results.table import leaderboard as board
    from hpceval.results.table import results_frame
    from hpceval.runs.index import find_run, list_runs

    run_dirs = ([find_run(str(r)).run_dir for r in runs] if runs
                else [r.run_dir for r in list_runs() if r.run_dir.is_dir()])
    frame = results_frame(run_dirs, models=models, tasks=tasks)
    return board(frame, metric) if leaderboard else frame


def evaluate(url: str, tasks: Sequence[str | Mapping[str, Any]], *, model_id: str,
             output_dir: str | Path | None = None, endpoint_type: str = "chat",
             api_key_name: str | None = None, params: Mapping[str, Any] | None = None,
             wait: bool = True, timeout_s: float | None = None,
             overrides: Sequence[str] = ()) -> Any:
    """Run tasks against one OpenAI-compatible endpoint here, without Slurm.

    The local execution path with deployment.type none: the same rendered job script runs
    with bash on this machine. With ``wait`` (default) it blocks until the run ends and
    returns its results DataFrame; otherwise it returns the Submitted record at once.
    ``api_key_name`` is the NAME of an environment variable holding the key.
    """
    run: dict[str, Any] = {
        "defaults": [{"execution": "local"}],
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": url, "model_id": model_id, "type": endpoint_type,
                                    "api_key_name": api_key_name}},
        "evaluation": {"tasks": [t if isinstance(t, Mapping) else {"name": t} for t in tasks],
                       "params": dict(params or {})},
    }
    if output_dir is not None:
        run["execution"] = {"output_dir": str(output_dir)}
    submitted = submit(run, overrides)
    if not wait:
        return submitted
    from hpceval.results.table import results_frame
    from hpceval.runs.state import Tracker

    tracker = Tracker()  # the run's own backend answers (a local run never asks Slurm)
    tracker.add(submitted.run_dir)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not tracker.refresh(force=True)[0].phase.terminal:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{submitted.invocation_id} still running after {timeout_s} s; "
                               f"it goes on in the background ({submitted.run_dir})")
        time.sleep(1.0)
    return results_frame([submitted.run_dir])


def watch(config: str | Path, checkpoints: str | Path, overrides: Sequence[str] = (), *,
          profile: str | None = None, pattern: str = "step_*", step_regex: str | None = None,
          marker: str | None = None, grace_s: int | None = None, interval_s: int = 600,
          after_job: str | None = None, attempts: int = 3, max_per_tick: int | None = None,
          trust_owners: Sequence[str] = (), client: SlurmClient | None = None) -> Any:
    """`hpceval watch start`: evaluate each new complete checkpoint in `checkpoints`.

    Returns ``hpceval.watch.control.Started`` (watch_id, watch_dir, script, tick_job). A
    checkpoint is complete by its `marker` file, else once unchanged for `grace_s` (default
    300). Only checkpoints owned by the caller or a `trust_owners` user are evaluated, at
    most `max_per_tick` a tick; `Started.warnings` says if others can write the folder.
    docs/watch.md."""
    from hpceval.watch.control import start_watch
    from hpceval.watch.spec import (
        DEFAULT_GRACE_S,
        DEFAULT_MAX_PER_TICK,
        WatchSpec,
        parse_interval,
    )
    from hpceval.watch.trust import resolve_owners

    options = WatchSpec(
        watch_id="", kind="", run_file=str(Path(config).resolve()), overrides=tuple(overrides),
        profile=profile, checkpoints=str(Path(checkpoints).expanduser().absolute()),
        pattern=pattern, step_regex=step_regex, marker=marker,
        grace_s=None if marker else (grace_s or DEFAULT_GRACE_S),
        interval_s=parse_interval(str(interval_s)), after_job=after_job, attempts=attempts,
        max_per_tick=max_per_tick or DEFAULT_MAX_PER_TICK,
        trust_uids=resolve_owners(trust_owners))
    return start_watch(options, client=client)


def watch_status(watch_ref: str | Path, *, client: SlurmClient | None = None
                 ) -> dict[str, Any]:
    """`hpceval status WATCH --json` as a dict (one sacct call)."""
    from hpceval.watch.control import find_watch
    from hpceval.watch.status import watch_status as status_of

    return status_of(find_watch(str(watch_ref)), client)


def watch_steps(watch_ref: str | Path) -> Any:
    """A watch's results with a `step` column (hpceval.results.steps.step_table)."""
    from hpceval.results.steps import step_table
    from hpceval.watch.control import find_watch, submitted_points

    return step_table(submitted_points(find_watch(str(watch_ref))))


def doctor(config: str | Path | None = None, overrides: Sequence[str] = (), *,
           profile: str | None = None, on_node: bool = False,
           network_target: str | None = None, timeout_s: float = 300.0,
           client: SlurmClient | None = None) -> dict[str, Any]:
    """`hpceval doctor --json` as a dict: a run file's site (and staging), or a profile's alone
    (``profile`` without ``config``). ``on_node`` submits the one short CPU job and waits for
    its report, at most ``timeout_s``. Exit status as ``result["exit_code"]``. A ``client``
    must also have ``test_only`` (hpceval.doctor.login.ProbingClient)."""
    from typing import cast

    from hpceval.doctor.check import doctor as run_doctor
    from hpceval.doctor.check import profile_spec
    from hpceval.doctor.login import ProbingClient

    if config is None:
        if profile is None:
            raise ValueError("doctor: give a run file or a profile")
        spec, configs = profile_spec(profile, overrides), []
    else:
        configs = _configs(config, overrides, profile, False)
        spec = configs[0].spec
    probing = cast(ProbingClient, client) if client is not None else None
    return run_doctor(spec, configs, client=probing, on_node=on_node,
                      network_target=network_target, timeout_s=timeout_s).to_json()


# Top-level names (hpceval.load_results, hpceval.render_scripts): see the module docstring.
load_results = results
render_scripts = render

