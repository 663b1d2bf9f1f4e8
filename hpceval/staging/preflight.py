"""Preflight: what would make a job fail after it waited in the queue, checked before submitting.

Each problem is a ConfigIssue naming the key and the command that fixes it, so ``submit`` can
raise ConfigError (exit 2) and queue nothing. Everything is checked from the login node, which
is why paths must be on shared storage that the login node mounts too. Secrets are checked by
NAME only; their values are never read into a message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from hpceval.backends import backend_for
from hpceval.config import ResolvedConfig
from hpceval.config.checks import ENV_NAME
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.images import format_problem, image_file_problem
from hpceval.runtimes import runtime_for
from hpceval.staging import data as hub
from hpceval.staging.images import image_needs
from hpceval.staging.stage import stage_command
from hpceval.staging.task_dirs import KEY as INCLUDE_PATH
from hpceval.staging.task_dirs import include_path_issue

_SHARED = ("hpceval checks it from the login node, so it must be on shared storage that the "
           "login and compute nodes both mount")


def preflight(resolved: ResolvedConfig, *,
              environ: Mapping[str, str] | None = None) -> list[ConfigIssue]:
    """Every problem of one model's run that only shows once the job runs (empty: go)."""
    env = os.environ if environ is None else environ
    issues = _image_issues(resolved)
    issues += _home_pull_issues(resolved)
    issues += _checkpoint_issues(resolved)
    issues += _data_issues(resolved)
    issues += _env_issues(resolved, env)
    return list(dict.fromkeys(issues))


def preflight_all(configs: Sequence[ResolvedConfig], *,
                  environ: Mapping[str, str] | None = None) -> list[ConfigIssue]:
    """preflight() over every model of a sweep; an issue the models share is listed once."""
    issues: list[ConfigIssue] = []
    for resolved in configs:
        issues += preflight(resolved, environ=environ)
    return list(dict.fromkeys(issues))


def check_preflight(configs: ResolvedConfig | Sequence[ResolvedConfig], *,
                    environ: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError (exit status 2) listing every preflight issue; return if none."""
    batch = [configs] if isinstance(configs, ResolvedConfig) else list(configs)
    issues = preflight_all(batch, environ=environ)
    if issues:
        raise ConfigError(issues)


def preflight_notes(configs: ResolvedConfig | Sequence[ResolvedConfig]) -> list[ConfigIssue]:
    """What works, but costs every job, as issues that do not refuse: a docker:// server or
    judge image that online compute nodes pull and convert at run time because nothing is
    staged in execution.image_dir for it (offline, that is a refusal: _image_issues)."""
    batch = [configs] if isinstance(configs, ResolvedConfig) else list(configs)
    notes: list[ConfigIssue] = []
    for resolved in batch:
        ex = resolved.spec.execution
        if ex.offline:
            continue
        runtime = runtime_for(ex.container_runtime)
        when = ("by the run's pull job, a CPU job that the jobs holding GPUs wait for"
                if backend_for(ex.type).pulls_ahead else
                "by the job, before its servers start: the job's walltime pays for it")
        for need in image_needs(resolved):
            if need.purpose != "server" or not need.pulled_at_run_time:
                continue
            where = (f"in {need.sif}" if need.sif else
                     "(set execution.image_dir to a shared folder first)")
            notes.append(ConfigIssue(
                need.where, f"{need.in_job} is pulled and converted at run time, once for "
                f"each run ({when})",
                f"stage it once {where} with `{stage_command(resolved)}`; jobs then run that "
                f"{runtime.staged_kind}"))
    return list(dict.fromkeys(notes))


def _image_issues(resolved: ResolvedConfig) -> list[ConfigIssue]:
    offline = resolved.spec.execution.offline
    runtime = runtime_for(resolved.spec.execution.container_runtime)
    kind = runtime.staged_kind
    fix = stage_command(resolved)
    issues: list[ConfigIssue] = []
    for need in image_needs(resolved):
        if need.pulled_at_run_time:
            if not offline:
                continue  # online nodes pull it themselves
            first = "" if need.sif else "set execution.image_dir to a shared folder, "
            if need.where.endswith((".image", ".container")):
                sif = need.sif or f"the {kind} it writes"
                how = f"{first}run `{fix}`, then set {need.where}={sif}"
            else:
                how = f"{first}run `{fix}`"
            issues.append(ConfigIssue(need.where, f"compute nodes are offline "
                                      f"(execution.offline), but {need.in_job} ({need.purpose}) "
                                      "would be pulled at run time", how))
            continue
        sif = Path(need.in_job)
        problem = image_file_problem(sif) or (  # the rule the runtime staged it by, too
            format_problem(sif, runtime.name, runtime.image_formats))
        if problem is not None:
            how = f"run `{fix}` on the login node"
            if need.reference is None:
                how = f"run `{fix} --pull {sif.name}=docker://REPO:TAG` on the login node"
            issues.append(ConfigIssue(need.where, f"{kind} {sif} ({need.purpose}) is "
                                      f"{problem}", f"{how}; {_SHARED}"))
    return issues


def home_pull_problem(folder: str | os.PathLike[str], pulled: Sequence[str]) -> str | None:
    """Why the run's pull job may not pull ``pulled`` into the images/ folder of a run in
    ``folder``: it is in the user's home; None when it may (or nothing is pulled). The one rule
    that submit's preflight (``folder``: execution.output_dir, the run not written yet) and
    resume, which submits the pull job again when an image is missing (``folder``: the run
    directory), both ask. Only where a pull job pulls ahead (Slurm): one vLLM image (10-20 GB)
    fills a home quota of a few GB and the pull fails after its wait in the queue, or fills
    home for every job of the user; the local backend's job pulls for itself, on a machine
    whose home is its disk."""
    home = _home()
    if not pulled or home is None or not _is_under(Path(folder), home):
        return None
    return (f"{folder} is in your home folder ({home}), and the run's pull job would pull "
            f"{', '.join(sorted(set(pulled)))} into the run's images/ folder there: one server "
            "image is 10-20 GB, more than a home quota holds")


def _home_pull_issues(resolved: ResolvedConfig) -> list[ConfigIssue]:
    """home_pull_problem for a run about to be submitted: each docker:// image nothing staged
    that the pull job would write under execution.output_dir (render/pull.py). Offline runs
    pull nothing (_image_issues refuses such an image already)."""
    ex = resolved.spec.execution
    if ex.offline or not backend_for(ex.type).pulls_ahead:
        return []
    runtime = runtime_for(ex.container_runtime)
    pulled = sorted({need.in_job for need in image_needs(resolved)
                     if need.pulled_at_run_time and runtime.pulled_in_job(need.in_job)})
    problem = home_pull_problem(ex.output_dir, pulled)
    if problem is None:
        return []
    home = _home()
    staged = ("stage them once into an execution.image_dir on scratch "
              if ex.image_dir is None or home is None or _is_under(Path(ex.image_dir), home)
              else "stage them once into execution.image_dir ")
    return [ConfigIssue(
        "execution.output_dir", problem,
        f"set execution.output_dir to a folder on scratch or project storage that every node "
        f"mounts, or {staged}with `{stage_command(resolved)}` (then no pull job runs)")]


def _home() -> Path | None:
    """The user's home folder, symlinks resolved (/home -> /gpfs/home); None when there is
    none to speak of (no $HOME and no passwd entry, or '/' as for some service accounts)."""
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError, OSError):
        return None
    return None if home == Path(home.anchor) else home


def _is_under(path: Path, folder: Path) -> bool:
    """Whether ``path`` (which need not exist yet) is ``folder`` or inside it, by real path:
    a symlink on the way counts where it leads."""
    try:
        return path.expanduser().resolve().is_relative_to(folder)
    except (RuntimeError, OSError):  # a symlink loop
        return False


def _checkpoint_issues(resolved: ResolvedConfig) -> list[ConfigIssue]:
    """The model's checkpoint, and each judge's (auxiliary deployments)."""
    from hpceval.config.aux_layout import server_deployments

    issues: list[ConfigIssue] = []
    for where, dep in server_deployments(resolved.spec):
        if dep.checkpoint_path:
            issues += _checkpoint_issue(Path(dep.checkpoint_path), f"{where}.checkpoint_path")
    return issues


def _checkpoint_issue(path: Path, key: str) -> list[ConfigIssue]:
    if path.is_dir():
        try:
            next(path.iterdir())
        except StopIteration:
            return [ConfigIssue(key, f"{path} is an empty folder",
                                "copy the checkpoint there, or point to the right folder")]
        except OSError as exc:
            return [ConfigIssue(key, f"{path} cannot be read: {exc.strerror}",
                                "fix its permissions for your user")]
        return []
    if path.is_file() and path.suffix == ".gguf":  # vLLM also serves a single GGUF file
        return []
    return [ConfigIssue(key, f"{path} is not a directory here", f"check the path; {_SHARED}")]


def _data_issues(resolved: ResolvedConfig) -> list[ConfigIssue]:
    ex = resolved.spec.execution
    issues: list[ConfigIssue] = []
    for key in ("hf_cache_dir", "dataset_dir"):
        folder = getattr(ex, key)
        if folder and not Path(folder).is_dir():
            issues.append(ConfigIssue(f"execution.{key}", f"{folder} does not exist (the job "
                                      "binds it into containers)",
                                      f"mkdir -p {folder}, or fix the path; {_SHARED}"))
    for where, extra in hub.task_extras(resolved):
        # Local files a harness reads: a custom lm-eval task folder, a tokenizer folder.
        for name in (INCLUDE_PATH, "tokenizer"):
            value = extra.get(name)
            key = f"{where}.params.extra.{name}"
            if name == INCLUDE_PATH and isinstance(value, str) and not value.startswith("/"):
                # what compose left relative (a catalogue's, a $VAR): nothing here to check
                issues.append(ConfigIssue(key, f"{value!r} is not an absolute path: lm-eval "
                                          "would look for it in the task's own new folder of "
                                          "the run directory, and hpceval cannot check it",
                                          "give an absolute path (in the run file or -o, a "
                                          "relative one means the folder submit runs in)"))
                continue
            if not isinstance(value, str) or not value.startswith("/"):
                continue
            if not Path(value).exists():
                issues.append(ConfigIssue(key, f"{value} does not exist",
                                          f"check the path; {_SHARED}"))
            elif name == INCLUDE_PATH and (refused := include_path_issue(Path(value), key)):
                issues.append(refused)
    if ex.offline:
        for where, task in hub.offline_blockers(resolved):
            issues.append(ConfigIssue(where, f"compute nodes are offline, but "
                                      f"{task.qualified_name} {task.needs_network}, which no "
                                      "staging can replace",
                                      "run it where compute nodes reach the internet "
                                      "(execution.offline=false), or leave it out"))
        for need in hub.data_needs(resolved):
            if ex.hf_cache_dir and hub.is_cached(need, ex.hf_cache_dir):
                continue
            where = f"in {hub.cache_dir_for(need, ex.hf_cache_dir)}" if ex.hf_cache_dir else (
                "(no execution.hf_cache_dir to stage it into)")
            issues.append(ConfigIssue(need.where, f"compute nodes are offline and {need.kind} "
                                      f"{need.repo_id} is not staged {where}",
                                      f"run `{stage_command(resolved)}` on the login node"))
    return issues


def _env_issues(resolved: ResolvedConfig, env: Mapping[str, str]) -> list[ConfigIssue]:
    """A harness's required variables: set here (the scheduler exports the submitting environment),
    or given in env_vars (whose host:NAME references config validation already checked)."""
    spec = resolved.spec
    issues: list[ConfigIssue] = []
    for rt in resolved.tasks:
        task, task_spec = rt.task, rt.spec
        given = {**spec.execution.env_vars, **spec.evaluation.env_vars, **task_spec.env_vars}
        for name in task.required_env:
            if name in given or name in env or not ENV_NAME.match(name):
                continue
            issues.append(ConfigIssue(
                f"evaluation.tasks.{task_spec.name}.env_vars",
                f"{task.qualified_name} needs ${name}, which is not set",
                f"export {name}=... before submitting (passed to the job by name; the value "
                "is never stored)"))
    return issues
