"""The other verbs: evaluate (an endpoint, here), watch, stage, discover, doctor."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpceval.api._load import ConfigSource, find_watch, load
from hpceval.api._runs import submit

if TYPE_CHECKING:
    import pandas as pd

    from hpceval.backends import SchedulerClient
    from hpceval.doctor.report import Report
    from hpceval.runs.submit import Submitted
    from hpceval.staging import StageReport
    from hpceval.staging.discover import Discovered
    from hpceval.watch.control import Started


def evaluate(url: str, tasks: Sequence[str | Mapping[str, Any]], *, model_id: str,
             output_dir: str | Path | None = None, endpoint_type: str = "chat",
             api_key_name: str | None = None, params: Mapping[str, Any] | None = None,
             wait: bool = True, timeout_s: float | None = None,
             overrides: Sequence[str] = ()) -> pd.DataFrame | Submitted:
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
          marker: str | None = None, grace_s: int | str | None = None,
          interval_s: int | str = 600, after_job: str | None = None, attempts: int = 3,
          max_per_tick: int | None = None, trust_owners: Sequence[str] = (),
          dry_run: bool = False, client: SchedulerClient | None = None) -> Started:
    """`hpceval watch start`: evaluate each new complete checkpoint in `checkpoints`.

    Returns ``hpceval.watch.control.Started`` (watch_id, watch_dir, script, tick_job). A
    checkpoint is complete by its `marker` file, else once unchanged for `grace_s` (default
    300). Durations are seconds or '10m', '90s', '1h'. Only checkpoints owned by the caller
    or a `trust_owners` user are evaluated, at most `max_per_tick` a tick;
    `Started.warnings` says if others can write the folder. ``dry_run``: validated and
    rendered (``Started.script``), nothing written or submitted. docs/watch.md."""
    from hpceval.errors import ConfigError
    from hpceval.watch.control import start_watch
    from hpceval.watch.spec import (
        DEFAULT_GRACE_S,
        DEFAULT_MAX_PER_TICK,
        WatchSpec,
        parse_interval,
    )
    from hpceval.watch.trust import resolve_owners

    if marker and grace_s:
        raise ConfigError.at("--grace", "goes with no --marker: a checkpoint is complete by "
                             "its marker, or by its files staying the same", "give one")
    grace = None if marker else (parse_interval(str(grace_s), "--grace") if grace_s
                                 else DEFAULT_GRACE_S)
    options = WatchSpec(
        watch_id="", kind="", run_file=str(Path(config).resolve()), overrides=tuple(overrides),
        profile=profile, checkpoints=str(Path(checkpoints).expanduser().absolute()),
        pattern=pattern, step_regex=step_regex, marker=marker, grace_s=grace,
        interval_s=parse_interval(str(interval_s)), after_job=after_job, attempts=attempts,
        max_per_tick=max_per_tick or DEFAULT_MAX_PER_TICK,
        trust_uids=resolve_owners(trust_owners))
    return start_watch(options, client=client, dry_run=dry_run)


def stop_watch(watch_ref: str | Path, *, output_dirs: Iterable[str | Path] = (),
               client: SchedulerClient | None = None) -> tuple[Path, list[str]]:
    """`hpceval watch stop`: no further tick (evaluations already submitted go on). Returns
    the watch directory and the tick jobs cancelled."""
    from hpceval.watch.control import stop_watch as stop

    watch_dir = find_watch(watch_ref, output_dirs)
    return watch_dir, stop(watch_dir, client)


def resume_watch(watch_ref: str | Path, *, output_dirs: Iterable[str | Path] = (),
                 client: SchedulerClient | None = None) -> tuple[Path, str]:
    """`hpceval watch resume`: queue a tick now (claims in state.json are kept: nothing is
    evaluated twice). Returns the watch directory and the tick job."""
    from hpceval.watch.control import resume_watch as resume

    watch_dir = find_watch(watch_ref, output_dirs)
    return watch_dir, resume(watch_dir, client)


def watch_status(watch_ref: str | Path, *, output_dirs: Iterable[str | Path] = (),
                 client: SchedulerClient | None = None) -> dict[str, Any]:
    """`hpceval status WATCH --json` as a dict (one scheduler call)."""
    from hpceval.watch.status import watch_status as status_of

    return status_of(find_watch(watch_ref, output_dirs), client)


def watch_steps(watch_ref: str | Path) -> pd.DataFrame:
    """A watch's results with a `step` column (hpceval.results.checkpoints.step_table)."""
    from hpceval.results.checkpoints import step_table
    from hpceval.watch.control import submitted_points

    return step_table(submitted_points(find_watch(watch_ref)))


def doctor_report(config: ConfigSource = None, overrides: Sequence[str] = (), *,
                  profile: str | None = None, on_node: bool = False,
                  network_target: str | None = None, timeout_s: float = 300.0,
                  client: SchedulerClient | None = None) -> Report:
    """`hpceval doctor`: a run file's site (and staging), or a profile's alone (``profile``
    without ``config``), as a report of ok / warning / problem lines with the fix
    (``.table()``, ``.to_json()``, ``.exit_code``). ``on_node`` submits the one short CPU
    job and waits for its report, at most ``timeout_s``. A ``client`` must also have
    ``test_only`` (hpceval.doctor.login.ProbingClient)."""
    from typing import cast

    from hpceval.doctor.check import doctor as run_doctor
    from hpceval.doctor.check import profile_spec
    from hpceval.doctor.login import ProbingClient

    if config is None:
        if profile is None:
            from hpceval.errors import HpcevalError

            raise HpcevalError("doctor: nothing to check", "give a run file or a profile",
                               exit_code=2)
        spec, configs = profile_spec(profile, overrides), []
    else:
        configs = load(config, overrides, profile=profile, check_environment=False)
        spec = configs[0].spec
    probing = cast(ProbingClient, client) if client is not None else None
    return run_doctor(spec, configs, client=probing, on_node=on_node,
                      network_target=network_target, timeout_s=timeout_s)


def doctor(config: str | Path | None = None, overrides: Sequence[str] = (), *,
           profile: str | None = None, on_node: bool = False,
           network_target: str | None = None, timeout_s: float = 300.0,
           client: SchedulerClient | None = None) -> dict[str, Any]:
    """`hpceval doctor --json` as a dict (doctor_report's ``to_json()``); the exit status as
    ``result["exit_code"]``."""
    return doctor_report(config, overrides, profile=profile, on_node=on_node,
                         network_target=network_target, timeout_s=timeout_s,
                         client=client).to_json()


def discover(image: str | Path, *, runtime: str = "apptainer", reference: str | None = None,
             out_dir: str | Path | None = None, dry_run: bool = False) -> list[Discovered]:
    """`hpceval tasks discover`: add the harness and tasks of an eval-factory image (or a
    venv with the harness packages) to the user's task catalogue; ``reference`` is the image
    the SIF was built from. Only what the catalogue lacks is written, validated first."""
    from hpceval.staging.discover import discover as run_discover

    return run_discover(Path(image), runtime=runtime, image=reference,
                        out_dir=Path(out_dir) if out_dir is not None else None,
                        dry_run=dry_run)


def stage(config: ConfigSource, overrides: Sequence[str] = (), *, profile: str | None = None,
          dry_run: bool = False, force: bool = False, pulls: Mapping[str, str] | None = None,
          echo: Callable[[str], None] = lambda _: None) -> StageReport:
    """`hpceval stage`: pull the run's images into execution.image_dir and fetch its hub data
    (model, tokenizers, datasets) into execution.hf_cache_dir, on the login node.

    ``pulls`` maps a SIF path of the config to the docker:// image it is built from (when it
    has no record yet); ``echo`` gets each progress line. Secrets are not checked. Raises
    ConfigError (nothing done) when the plan cannot work; the report's ``ok`` is False when
    an item could not be staged (its ``hints`` say how)."""
    from hpceval.staging import stage as run_stage

    return run_stage(load(config, overrides, profile=profile, check_environment=False),
                     dry_run=dry_run, force=force, known=dict(pulls or {}), echo=echo)
