"""The run directory's file names, defined once for the Python readers and writers.

A run directory is the contract between the login node (submit, status, resume, kill) and
the job on the compute nodes; every name below is written by one side and read by the other.
This module imports nothing, so every layer can use it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# -- written by submit (hpceval.runs.rundir) ------------------------------------------------
RUN_FILE = "run.json"  # what the controller needs; written last: the directory is complete
JOB_SCRIPT = "job.sbatch"  # single model: the job script exactly as submitted
SWEEP_SCRIPT = "sweep.sbatch"  # sweep: the array dispatcher exactly as submitted
ELEMENT_SCRIPT = "job.sh"  # sweep: models/<key>/job.sh, one model's job script
AGGREGATE_SCRIPT = "aggregate.sbatch"  # sweep on Slurm: the dependent aggregation job
EXPORT_SCRIPT = "export.sbatch"  # export.destinations on Slurm: the dependent export job
LOCAL_RUNNER = "local.sh"  # local execution: runs the job script(s) here with bash
LOG_DIR = "logs"  # array element and aggregation logs
JOBS_FILE = "jobs.json"  # the chain of jobs (hpceval.runs.jobs)

# -- written by the job ---------------------------------------------------------------------
SUCCESSORS_FILE = "jobs.chain"  # "<id> [model key]" per successor a job sbatch'ed itself
EXPORT_WAITED_FILE = "export.waited"  # successor ids the export job has already waited for
AGGREGATE_WAITED_FILE = "aggregate.waited"  # the same, for a sweep's aggregation with a judge
# exit status of `hpceval.results.table aggregate --resubmit` when it submitted itself again
# after auto-resume successors: the aggregation script then leaves the sweep's judge running
WAITS_FOR_SUCCESSORS = 3
JOB_FAILURE_FILE = "job-failure"  # models/<key>/: one line, why the job itself failed
SERVER_IMAGES_DIR = "images"  # docker:// server images the job pulled itself (once per run)
LOADS_FILE = "loads"  # models/<key>/: "<job id> <seconds to healthy>" per allocation
INTERRUPTED_FILE = "interrupted"  # models/<key>/: the job stopped before its walltime
PROGRESS_FILE = "progress.json"  # models/<key>/: written by the proxy, read by `status`
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
AUX_STOP_FILE = "stop"  # sweep judge job: written by the aggregation step; the judge job ends
AUX_JOB_SCRIPT = "judge.sbatch"  # sweep judge job: its script, in auxiliary/<name>/

# -- written by the local backend's runner ----------------------------------------------------
LOCAL_RC_FILE = "local.rc"  # models/<key>/: the job script's exit status
LOCAL_LOG_FILE = "local.log"  # models/<key>/: its output (what Slurm's --output would hold)
LOCAL_RUNNER_LOG = "logs/local-runner.log"

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
    "successors": SUCCESSORS_FILE, "progress": PROGRESS_FILE, "proxy_ready": PROXY_READY_FILE,
    "local_rc": LOCAL_RC_FILE, "local_log": LOCAL_LOG_FILE,
    "aux_dir": AUX_DIR, "aux_endpoint": AUX_ENDPOINT_FILE, "aux_token": AUX_TOKEN_FILE,
    "aux_stop": AUX_STOP_FILE, "server_images": SERVER_IMAGES_DIR, "task_route": TASK_ROUTE,
    "runtime": RUNTIME_FILE,
}


def aux_folder(name: str) -> str:
    """A sweep judge's folder (scope: sweep), relative to the run directory; also its key in
    status and cost figures, where it never clashes with a model key (those have no "/")."""
    return f"{AUX_DIR}/{name}"


def judge_names(run: dict[str, Any]) -> list[str]:
    """The sweep judges of a run, from run.json's "auxiliary" list (written by submit)."""
    return [str(a["name"]) for a in run.get("auxiliary") or []]


def is_done(task_dir: Path) -> bool:
    """THE definition of a finished task, in Python; the job script tests the same marker.

    `done` is written last, after results.json and manifest.json are in place (atomically), so
    its presence alone says the results are whole and final: nothing overwrites them, and a
    later job skips the task.
    """
    return (task_dir / DONE_MARKER).is_file()
