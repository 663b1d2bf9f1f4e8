"""The run directory's file names, defined once for the Python readers and writers.

A run directory is the contract between the login node (submit, status, resume, kill) and
the job on the compute nodes; every name below is written by one side and read by the other.
This module imports nothing, so every layer can use it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar, overload

# -- the tree: <run dir>/models/<key>/tasks/<task>/ (paths below, as functions) -------------
MODELS_DIR = "models"  # one folder per model of the run (its key)
TASKS_DIR = "tasks"  # models/<key>/tasks/<task key>/: one folder per task
SERVER_DIR = "server"  # models/<key>/server/: the model servers' command lines and logs
# server/: the log of the model's first instance (its head), as _launch.j2 names it
FIRST_SERVER_LOG = "instance-0.log"
CACHE_DIR = "cache"  # models/<key>/cache/, <task dir>/cache/: what a resumed job replays
CONFIG_FILE = "run.yaml"  # the run's (and each models/<key>/'s) resolved config as submitted
HARNESS_LOG = "harness.log"  # <task dir>/: the harness's output
HARNESS_OUT_DIR = "harness"  # <task dir>/harness/: the harness's own files (HPCEVAL_OUTPUT_DIR)
PROXY_LOG = "proxy.log"  # the in-job proxy's log, in the folder it serves

# -- written by submit (hpceval.runs.rundir) ------------------------------------------------
RUN_FILE = "run.json"  # what the controller needs; written last: the directory is complete
JOB_SCRIPT = "job.sbatch"  # single model: the job script exactly as submitted
SWEEP_SCRIPT = "sweep.sbatch"  # sweep: the array dispatcher exactly as submitted
ELEMENT_SCRIPT = "job.sh"  # sweep: models/<key>/job.sh, one model's job script
AGGREGATE_SCRIPT = "aggregate.sbatch"  # sweep on Slurm: the dependent aggregation job
EXPORT_SCRIPT = "export.sbatch"  # export.destinations on Slurm: the dependent export job
PULL_SCRIPT = "pull.sbatch"  # Slurm: the CPU job that pulls the run's images before any GPU job
EXPORT_DIR = "export"  # the W&B exporter's own files (WANDB_DIR), written by the export step
LOCAL_RUNNER = "local.sh"  # local execution: runs the job script(s) here with bash
LOG_DIR = "logs"  # array element and aggregation logs
JOBS_FILE = "jobs.json"  # the chain of jobs (hpceval.runs.jobs)

# -- written by the job ---------------------------------------------------------------------
SUCCESSORS_FILE = "jobs.chain"  # "<id> [model key]" per successor a job submitted itself
EXPORT_WAITED_FILE = "export.waited"  # successor ids the export job has already waited for
AGGREGATE_WAITED_FILE = "aggregate.waited"  # the same, for a sweep's aggregation with a judge
# exit status of `python -m hpceval.job aggregate --resubmit` when it submitted itself again
# after auto-resume successors: the aggregation script then leaves the sweep's judge running
WAITS_FOR_SUCCESSORS = 3
JOB_FAILURE_FILE = "job-failure"  # models/<key>/: one line, why the job itself failed
# the run's compile caches, one folder per model and engine (job.compile_cache), unless
# execution.compile_cache_dir names another place; named in each host server's environment
COMPILE_CACHE_DIR = "compile-cache"
SERVER_IMAGES_DIR = "images"  # docker:// server images pulled for the run (once per run)
LOADS_FILE = "loads"  # models/<key>/: "<job id> <seconds to healthy>" per allocation
# models/<key>/: "<job id> <epoch seconds> <mark>" as each job passes its marks (results.ledger)
LEDGER_FILE = "ledger"
INTERRUPTED_FILE = "interrupted"  # models/<key>/: the job stopped before its walltime
PREEMPTIONS_FILE = "preemptions"  # models/<key>/: "<job id> <time>" per preemption Slurm requeued
MODEL_LOCK_FILE = "lock"  # models/<key>/: flock-ed by the one live job of the model; "<job> <pid>"
PROGRESS_FILE = "progress.json"  # models/<key>/: written by the proxy, read by `status`
# models/<key>/, beside progress.json: the servers' load sampled from /metrics while the job
# runs (queue, KV cache, tokens/s), written by the proxy (results.server_load)
SERVER_LOAD_FILE = "server-load.json"
PROXY_READY_FILE = "proxy.ready"  # models/<key>/: the proxy's pid, once it has bound its port
COMMAND_FILE = "command.sh"  # models/<key>/tasks/<task>/: written when the task starts
FAILED_FILE = "failed.json"  # models/<key>/tasks/<task>/: why the task failed
RESULTS_FILE = "results.json"  # models/<key>/tasks/<task>/: unified results
MANIFEST_FILE = "manifest.json"  # models/<key>/tasks/<task>/: provenance
DONE_MARKER = "done"  # models/<key>/tasks/<task>/: written last; results are final
RUNTIME_FILE = "runtime.json"  # models/<key>/tasks/<task>/: the proxy's counts (results.runtime)
# Each task asks the in-job proxy under <proxy>/task/<task key>/...: the proxy takes the prefix
# off and counts the answers for that task (results.runtime); the job script sets the URLs.
TASK_ROUTE = "/task"
# Every task key config.tasks makes ([A-Za-z0-9._-], no leading "."): "." and ".." never match
# (fullmatch): the route's key, a runtime.json's folder, a per-task interceptor chain's key.
TASK_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

# -- auxiliary deployments (a judge): models/<key>/auxiliary/<name>/ when served in the job
# (scope job), <run dir>/auxiliary/<name>/ for the sweep's own judge job (scope sweep) ----------
AUX_DIR = "auxiliary"
AUX_ENDPOINT_FILE = "endpoint.json"  # sweep judge job: its instance URLs, once all are healthy
AUX_TOKEN_FILE = "token"  # sweep judge job: the per-job token its servers require (mode 0600)
AUX_TLS_KEY = "tls_sha256"  # endpoint.json: the SHA-256 of the judge front's certificate
AUX_TLS_DIR = "tls"  # auxiliary/<name>/: the judge front's key (0600) and certificate, 0700
AUX_TLS_NAME = "hpceval-judge"  # the name in that certificate (the job's own health check)
AUX_STOP_FILE = "stop"  # sweep judge job: written by the aggregation step; the judge job ends
AUX_JOB_SCRIPT = "judge.sbatch"  # sweep judge job: its script, in auxiliary/<name>/

# -- a server on a Unix socket (deployment.unix_socket): the job's own folder on its first node
# An instance URL "unix:<path>" means HTTP over the socket at <path> (curl --unix-socket, the
# proxy's UnixConnector), not over a port: the health wait, URL_PIDS and the proxy's upstreams
# carry it as they carry "http://<node>:<port>".
UNIX_URL = "unix:"
# The folder the job makes for its sockets (mktemp -d: mode 0700, a fresh name nobody could
# create first), node-local and short: a socket's path must fit in 108 bytes (sun_path), which
# a run directory on shared storage often does not, and not every shared file system binds one.
SOCKET_DIR_TEMPLATE = "/tmp/hpceval-XXXXXXXX"


def server_socket(slot: int) -> str:
    """The socket file of the instance on port slot ``slot`` (unique in the job, judges too)."""
    return f"server-{slot}.sock"


def unix_socket(url: str) -> str | None:
    """The socket path of a "unix:<path>" instance URL; None for an http(s) URL."""
    return url[len(UNIX_URL):] if url.startswith(UNIX_URL) else None



# evaluation.proxy_budget, passed to the proxy as --budget: in-flight requests per server
# instance. Checked on both sides of the contract, by one rule: when the config loads
# (config.checks, so a bad value names the key before submit) and when the proxy starts
# (job.proxy.config, for a hand-written or older job script).
PROXY_BUDGETS = ("off", "adaptive")  # besides a whole number of requests above 0


def is_proxy_budget(value: str) -> bool:
    """Whether `value` is a budget the proxy takes: off, adaptive or a number above 0."""
    return value in PROXY_BUDGETS or (value.isdigit() and int(value) > 0)

# -- written by the local backend's runner ----------------------------------------------------
LOCAL_RC_FILE = "local.rc"  # models/<key>/: the job script's exit status
LOCAL_LOG_FILE = "local.log"  # models/<key>/: its output (what Slurm's --output would hold)
# models/<key>/: "<runner id> <start> <end> <GPUs>" per attempt the runner ran (epoch seconds)
LOCAL_USAGE_FILE = "local.usage"
LOCAL_RUNNER_LOG = f"{LOG_DIR}/local-runner.log"

# -- a checkpoint watch (hpceval.watch): <output_dir>/watch-<id>/ on shared storage ----------
WATCH_DIR_PREFIX = "watch-"  # the watch directory's name: watch-<watch id>
WATCH_FILE = "watch.json"  # written once by `watch start`: run file, overrides, options
WATCH_STATE_FILE = "state.json"  # checkpoints seen/claimed/submitted, tick jobs; under the lock
WATCH_LOCK_FILE = "state.json.lock"  # the filelock every writer of state.json holds
WATCH_SCRIPT = "tick.sbatch"  # the tick job's script, exactly as submitted (every tick)
WATCH_LOG_DIR = "logs"  # tick-<job id>.log

# The names the scripts use, handed to the templates as `files` (the job script, the local
# runner): templates write {{ files.done }}, never the literal, so bash and Python agree.
JOB_FILES = {
    "done": DONE_MARKER, "results": RESULTS_FILE, "command": COMMAND_FILE,
    "interrupted": INTERRUPTED_FILE, "job_failure": JOB_FAILURE_FILE, "loads": LOADS_FILE,
    "ledger": LEDGER_FILE, "first_server_log": FIRST_SERVER_LOG,
    "preemptions": PREEMPTIONS_FILE, "model_lock": MODEL_LOCK_FILE,
    "successors": SUCCESSORS_FILE, "progress": PROGRESS_FILE, "proxy_ready": PROXY_READY_FILE,
    "local_rc": LOCAL_RC_FILE, "local_log": LOCAL_LOG_FILE, "local_usage": LOCAL_USAGE_FILE,
    "aux_dir": AUX_DIR, "aux_endpoint": AUX_ENDPOINT_FILE, "aux_token": AUX_TOKEN_FILE,
    "aux_tls_key": AUX_TLS_KEY, "aux_tls_dir": AUX_TLS_DIR, "aux_tls_name": AUX_TLS_NAME,
    "aux_stop": AUX_STOP_FILE, "server_images": SERVER_IMAGES_DIR, "task_route": TASK_ROUTE,
    "runtime": RUNTIME_FILE, "server_load": SERVER_LOAD_FILE, "unix_url": UNIX_URL,
    "socket_dir": SOCKET_DIR_TEMPLATE,
    # the tree itself: folders and logs every job script builds its paths from
    "models_dir": MODELS_DIR, "tasks_dir": TASKS_DIR, "server_dir": SERVER_DIR,
    "cache_dir": CACHE_DIR, "harness_log": HARNESS_LOG, "harness_out": HARNESS_OUT_DIR,
    "proxy_log": PROXY_LOG, "element_script": ELEMENT_SCRIPT, "log_dir": LOG_DIR,
}

# The tree as functions: a str in gives a str out (the hot readers join text, as os.path does),
# a Path in gives a Path out; nothing else spells "models/<key>/tasks/<task>".
P = TypeVar("P", str, Path)


def _join(base: P, *parts: str) -> P:
    if isinstance(base, Path):
        return base.joinpath(*parts)
    return os.path.join(base, *parts)


@overload
def model_dir(run_dir: Path, key: str) -> Path: ...
@overload
def model_dir(run_dir: str, key: str) -> str: ...
def model_dir(run_dir: P, key: str) -> P:
    """models/<key>/: one model's folder (its config, job script, server, tasks)."""
    return _join(run_dir, MODELS_DIR, key)


@overload
def tasks_dir(run_dir: Path, key: str) -> Path: ...
@overload
def tasks_dir(run_dir: str, key: str) -> str: ...
def tasks_dir(run_dir: P, key: str) -> P:
    """models/<key>/tasks/: the folder of one model's task folders."""
    return _join(run_dir, MODELS_DIR, key, TASKS_DIR)


@overload
def task_dir(run_dir: Path, key: str, task: str) -> Path: ...
@overload
def task_dir(run_dir: str, key: str, task: str) -> str: ...
def task_dir(run_dir: P, key: str, task: str) -> P:
    """models/<key>/tasks/<task key>/: one task's results, logs and markers."""
    return _join(run_dir, MODELS_DIR, key, TASKS_DIR, task)


@overload
def aux_dir(run_dir: Path, name: str) -> Path: ...
@overload
def aux_dir(run_dir: str, name: str) -> str: ...
def aux_dir(run_dir: P, name: str) -> P:
    """auxiliary/<name>/ under a run directory (a sweep judge's job) or under a model's
    folder (a judge served in the model's job): the same name below either."""
    return _join(run_dir, AUX_DIR, name)


def element_script(key: str) -> str:
    """A sweep element's job script, relative to the run directory (models/<key>/job.sh)."""
    return f"{MODELS_DIR}/{key}/{ELEMENT_SCRIPT}"


def aux_folder(name: str) -> str:
    """A sweep judge's folder (scope: sweep), relative to the run directory; also its key in
    status and cost figures, where it never clashes with a model key (those have no "/")."""
    return f"{AUX_DIR}/{name}"


def run_dir_of_task(task_path: Path) -> Path | None:
    """The run directory of a task folder (the inverse of task_dir), None when the path is too
    short to be one (models/<key>/tasks/<task> is four levels below the run directory)."""
    parents = task_path.parents
    return parents[3] if len(parents) >= 4 else None


def judge_names(run: dict[str, Any]) -> list[str]:
    """The sweep judges of a run, from run.json's "auxiliary" list (written by submit)."""
    return [str(a["name"]) for a in run.get("auxiliary") or []]


def is_done(task_dir: str | Path) -> bool:
    """THE definition of a finished task, in Python; the job script tests the same marker.

    `done` is written last, after results.json and manifest.json are in place (atomically), so
    its presence alone says the results are whole and final: nothing overwrites them, and a
    later job skips the task. Text in, no Path made: the results table asks it of every task.
    """
    return os.path.isfile(os.path.join(task_dir, DONE_MARKER))
