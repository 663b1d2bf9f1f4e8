"""The compute-node half of ``hpceval doctor --on-node``: one short CPU job that reports.

The job body is a small bash script written here (not a template: it renders nothing of a
run), every value in it quoted by hpceval.shell. It only gathers facts (exit status and output
of each probe) into a JSON file in the doctor's private folder; what is ok, a warning or a
problem is decided here, on the login side, in `node_lines`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hpceval.backends.slurm.backend import ACTIVE_STATES
from hpceval.backends.slurm.commands import EXPORT_SETTING, SUBMIT, SUBMIT_EXPORT, WHY_PENDING
from hpceval.backends.slurm.header import gpu_request, log_name
from hpceval.config.schema import ExecutionSpec, RunSpec
from hpceval.doctor import node_site
from hpceval.doctor.login import ProbingClient, site_args
from hpceval.doctor.report import Line, Status
from hpceval.engines import engine_for
from hpceval.render.ports import EPHEMERAL_FIRST
from hpceval.render.quoting import listening_ports_function
from hpceval.runtimes import runtime_for, runtime_names
from hpceval.shell import quote

NODE = "node"
REPORT_FILE = "node-report.json"
SCRIPT_FILE = "doctor-job.sh"
NODE_WALLTIME = "00:05:00"
QUEUE_POLL_S = 10.0  # the queue is asked at most this often while the report is awaited


def _programs() -> dict[str, tuple[str, ...]]:
    """Every program a container runtime runs its containers with on a node (the registry's
    run_tool), with the arguments that print its version."""
    found: dict[str, tuple[str, ...]] = {}
    for name in runtime_names():
        runtime = runtime_for(name)
        if runtime.containers:
            found.setdefault(runtime.run_tool, runtime.version_args)
    return found


PROGRAMS = _programs()

_HELPERS = r'''
FACTS="$REPORT.facts"
: > "$FACTS"
json() {  # json TEXT: one JSON string (other control characters dropped)
  local s
  s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\n'/\\n}; s=${s//$'\r'/}
  printf '"%s"' "$s"
}
SEP=""
fact() {  # fact NAME RC OUTPUT
  printf '%s%s: {"rc": %d, "out": %s}' "$SEP" "$(json "$1")" "$2" "$(json "${3:0:2000}")" \
    >> "$FACTS"
  SEP=", "
}
probe() {  # probe NAME COMMAND...: its exit status and output, bounded in time
  local out rc
  out=$(timeout 60 "${@:2}" 2>&1 < /dev/null); rc=$?
  fact "$1" "$rc" "$out"
}
'''

# The probes, after listening_ports (templates/listening_ports.j2, the job preamble's too).
_BODY = r'''
fact node 0 "$(hostname) $(uname -m)"
probe hpceval "$PY" -c 'import platform, hpceval; print(hpceval.__version__, platform.machine())'
# Loaded in this shell, as the job does, so a module's PATH counts for the programs below.
for m in "${MODULES[@]}"; do
  if ! type module > /dev/null 2>&1; then
    fact "module:$m" 127 "no module command in a batch shell"; continue
  fi
  out=$(mktemp); module load "$m" > "$out" 2>&1; rc=$?
  fact "module:$m" "$rc" "$(cat "$out")"; rm -f "$out"
done
# program_fact NAME VERSION_ARGS...: one per runtime's program (PROGRAMS, node.py)
program_fact() {
  if ! command -v "$1" > /dev/null; then fact "$1" 127 "not on PATH"; return; fi
  probe "$1" "$@"
}
#@PROGRAMS@
fact cuda_visible 0 "${CUDA_VISIBLE_DEVICES:-}"
if command -v nvidia-smi > /dev/null; then probe gpus nvidia-smi -L
else fact gpus 127 "nvidia-smi not on PATH"; fi
[ -n "$HF_CACHE" ] && probe hf_cache ls -A -- "$HF_CACHE"
[ -n "$IMAGE_DIR" ] && probe image_dir ls -A -- "$IMAGE_DIR"
if [ -n "$NET_HOST" ]; then
  # shellcheck disable=SC2016  # $1 and $2 are the inner bash's arguments
  probe network timeout 10 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$NET_HOST" "$NET_PORT"
  names=""; for v in https_proxy HTTPS_PROXY http_proxy HTTP_PROXY all_proxy; do
    [ -n "${!v:-}" ] && names="$names $v"; done
  fact proxy_vars 0 "${names# }"  # names only: a proxy URL can hold a password
fi
if command -v ip > /dev/null; then probe route ip route show default
else fact route 0 "$(awk '$2 == "00000000" {print "default dev " $1}' /proc/net/route)"; fi
fact export_env 0 "${!EXPORT_VAR:-}"  # what the job was submitted with (the site's default?)
fact listening 0 "$(listening_ports | sort -un | tr '\n' ' ')"
fact port_range 0 "$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)"
{ printf '{"version": 1, "facts": {'; cat "$FACTS"; printf '}}\n'; } > "$REPORT.tmp" \
  && mv "$REPORT.tmp" "$REPORT"
rm -f "$FACTS"
'''


@dataclass(frozen=True)
class NetTarget:
    host: str
    port: int
    why: str  # where it came from (the option, the endpoint URL, https_proxy)


def network_target(specs: Sequence[RunSpec], given: str | None,
                   environ: Mapping[str, str]) -> NetTarget | None:
    """What the node tries to reach: --network-target HOST:PORT, else the profile's proxy
    (https_proxy, passed to jobs by the scheduler) or an external endpoint URL; None: not tried."""
    if given:
        host, _, port = given.rpartition(":")
        return NetTarget(host.strip("[]"), int(port), "--network-target")
    for name in ("https_proxy", "HTTPS_PROXY"):
        if environ.get(name):
            return _target_of(environ[name], f"${name}")
    for spec in specs:
        url = spec.target.api_endpoint.url
        if url and not engine_for(spec.deployment.type).serves:
            return _target_of(url, "target.api_endpoint.url")
    return None


def _target_of(url: str, why: str) -> NetTarget | None:
    parts = urlsplit(url if "//" in url else f"http://{url}")
    if not parts.hostname:
        return None
    return NetTarget(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), why)


def job_script(ex: ExecutionSpec, python: str, report: Path, target: NetTarget | None) -> str:
    values = {"PY": python, "REPORT": str(report), "HF_CACHE": ex.hf_cache_dir or "",
              "IMAGE_DIR": ex.image_dir or "", "NET_HOST": target.host if target else "",
              "NET_PORT": str(target.port) if target else "", "EXPORT_VAR": EXPORT_SETTING}
    head = ["#!/bin/bash", "# hpceval doctor --on-node (hpceval/doctor/node.py): facts only.",
            "# No set -e (every probe runs) and no set -u (module systems read unset "
            "variables)."]
    head += [f"{name}={quote(value)}" for name, value in values.items()]
    head.append(f"MODULES=({quote(list(ex.modules))})")
    # ch-run, for one, refuses to start (even for --version) without $USER, which a job has
    # only where its submitter's environment had it
    head.append('export USER="${USER:-$(id -un)}"')
    # execution.module_init is shell code by definition (the job runs it verbatim too)
    head += list(ex.module_init)
    head += node_site.head(ex, site_args(ex))
    programs = [f"program_fact {quote([name, *args])}" for name, args in PROGRAMS.items()]
    body = _BODY.lstrip("\n").replace("#@PROGRAMS@\n", "".join(f"{p}\n" for p in programs))
    return "\n".join([*head, _HELPERS.strip("\n"), listening_ports_function().rstrip("\n"),
                      node_site.body().strip("\n"), body])


# The profile's sbatch_extra_flags that choose nodes: the node job goes where its jobs go.
_PLACEMENT_FLAGS = ("nodelist", "exclude", "constraint")


def job_args(ex: ExecutionSpec, folder: Path) -> list[str]:
    return [*site_args(ex), *_placement(ex), "--job-name=hpceval-doctor",
            f"--time={NODE_WALLTIME}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
            *_one_gpu(ex), f"--output={folder / log_name('doctor')}"]


def _placement(ex: ExecutionSpec) -> list[str]:
    """The node features and node lists the profile's jobs ask for (execution.constraint, and
    those of sbatch_extra_flags): the node job then runs on a node like theirs."""
    flags = {"constraint": ex.constraint} if ex.constraint else {}
    flags |= {flag: value for flag, value in ex.sbatch_extra_flags.items()
              if flag in _PLACEMENT_FLAGS and value not in (None, False, "")}
    return [f"--{flag}={value}" for flag, value in flags.items()]


def _one_gpu(ex: ExecutionSpec) -> list[str]:
    """One GPU, asked the way the profile's jobs ask for theirs (none for a CPU profile): the
    node job then sees what a model's job sees (the driver, the device cgroup)."""
    gpu = gpu_request(ex, 1) if ex.gpus_per_node > 0 else None
    return [] if gpu is None else [f"--{gpu[0]}={gpu[1]}"]


def _gpus_line(ex: ExecutionSpec, fact: Callable[[str], tuple[int, str] | None]) -> Line:
    rc, out = fact("gpus") or (127, "not probed")
    gpus = [row for row in out.splitlines() if row.startswith("GPU ")] if rc == 0 else []
    if gpus:
        return Line(NODE, "GPUs", Status.OK, f"{len(gpus)} visible: {_first(out)}")
    if not _one_gpu(ex):
        return Line(NODE, "GPUs", Status.OK, "none asked: the profile requests no GPUs")
    given = (fact("cuda_visible") or (0, ""))[1]
    if given:
        return Line(NODE, "GPUs", Status.WARNING, f"Slurm gave CUDA_VISIBLE_DEVICES={given}, "
                    f"but nvidia-smi lists none ({_last(out)})", "add the module with the "
                    "NVIDIA driver tools to execution.modules, or check the node's driver")
    return Line(NODE, "GPUs", Status.PROBLEM, f"the job asked for 1 GPU and sees none "
                f"({_last(out)})", "check execution.gpu_request and gpu_type against the "
                "partition's GRES (`sinfo -o %G`), and the node's driver")


def run_node_job(client: ProbingClient, ex: ExecutionSpec, folder: Path, script: str, *,
                 timeout_s: float, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 ) -> tuple[str | None, Any, Line | None]:
    """Submit the job and wait (bounded) for its report: (job id, facts, a problem line)."""
    path = folder / SCRIPT_FILE
    path.write_text(script, encoding="utf-8")
    path.chmod(0o700)
    from hpceval.backends.slurm.client import SlurmError

    try:
        job_id = client.submit(path, extra_args=job_args(ex, folder))
    except SlurmError as exc:
        return None, None, Line(NODE, "doctor job", Status.PROBLEM,
                                f"{SUBMIT} refused it: {exc.stderr or exc}",
                                "fix the login-side lines above first")
    report, deadline, state = folder / REPORT_FILE, clock() + timeout_s, "PENDING"
    asked: float | None = None
    while clock() < deadline:
        if report.is_file():
            try:
                facts = json.loads(report.read_text(encoding="utf-8", errors="replace"))
                return job_id, dict(facts["facts"]), None
            except (ValueError, KeyError, TypeError) as exc:
                return job_id, None, Line(NODE, "doctor job", Status.PROBLEM,
                                          f"job {job_id} wrote an unreadable report: {exc}",
                                          f"read {report} and {folder}/doctor-{job_id}.log")
        if asked is not None and clock() - asked < QUEUE_POLL_S:
            sleep(1.0)  # the report is a file of our own folder: cheap to look for
            continue
        asked = clock()
        entry = client.squeue([job_id]).get(job_id)
        state = entry.state if entry else "GONE"
        if state not in ACTIVE_STATES:
            sleep(1.0)  # the report is renamed into place just before the job ends
            if report.is_file():
                continue
            return job_id, None, Line(NODE, "doctor job", Status.PROBLEM,
                                      f"job {job_id} ended ({state}) without a report",
                                      f"read {folder}/doctor-{job_id}.log")
        sleep(1.0)
    client.cancel([job_id])
    return job_id, None, Line(NODE, "doctor job", Status.PROBLEM,
                              f"job {job_id} gave no report within {timeout_s:g} s ({state})",
                              f"see `{WHY_PENDING}` for why it waits; raise --timeout")


def node_lines(spec: RunSpec, facts: Mapping[str, Any], python: str,
               target: NetTarget | None) -> list[Line]:
    """The facts of the node job, judged."""
    ex = spec.execution

    def fact(name: str) -> tuple[int, str] | None:
        got = facts.get(name)
        return (int(got["rc"]), str(got["out"]).strip()) if isinstance(got, dict) else None

    node = (fact("node") or (0, "?"))[1]
    lines = [Line(NODE, "node", Status.OK, node)]
    rc, out = fact("hpceval") or (127, "not probed")
    lines.append(Line(NODE, "hpceval importable", Status.OK, f"{python}: hpceval {out}")
                 if rc == 0 else Line(
                     NODE, "hpceval importable", Status.PROBLEM,
                     f"HPCEVAL_PYTHON={python} cannot import hpceval on {node}: "
                     f"{_last(out)}", "set execution.python to a Python on shared storage that "
                     "has hpceval installed and runs on the nodes' CPU architecture"))
    for module in ex.modules:
        rc, out = fact(f"module:{module}") or (127, "not probed")
        lines.append(Line(NODE, f"module load {module}", Status.OK, "loaded") if rc == 0 else
                     Line(NODE, f"module load {module}", Status.PROBLEM, _last(out),
                          "check the name with `module avail` on a compute node; "
                          "execution.module_init for a batch shell without `module`"))
    runtime = ex.container_runtime
    # the program the runtime's containers need on the node (pyxis: enroot under srun)
    needed = runtime_for(runtime).run_tool if runtime_for(runtime).containers else None
    for program in PROGRAMS:
        rc, out = fact(program) or (127, "not probed")
        if rc == 0:
            lines.append(Line(NODE, program, Status.OK, _first(out)))
        elif program == needed:
            lines.append(Line(NODE, program, Status.PROBLEM, f"{_last(out)} (container_runtime "
                              f"{runtime} needs it)", "add the module that provides it to "
                              "execution.modules, or choose another execution.container_runtime"))
        else:
            lines.append(Line(NODE, program, Status.OK, f"{_last(out)} (not needed)"))
    lines.append(_gpus_line(ex, fact))
    for name, key, folder in (("hf_cache", "execution.hf_cache_dir", ex.hf_cache_dir),
                              ("image_dir", "execution.image_dir", ex.image_dir)):
        if folder:
            rc, out = fact(name) or (127, "not probed")
            lines.append(Line(NODE, key, Status.OK, f"{folder} readable") if rc == 0 else
                         Line(NODE, key, Status.PROBLEM, f"{folder}: {_last(out)}",
                              f"put {key} on storage the compute nodes mount, readable by you"))
    lines += _network_lines(fact, target)
    lines.append(_route_line(fact, offline=ex.offline))
    lines += node_site.site_lines(ex, fact)
    lines.append(_export_line(fact))
    lines.append(_ports_line(fact, spec.deployment.port))
    return lines


def _route_line(fact: Callable[[str], tuple[int, str] | None], *, offline: bool) -> Line:
    rc, out = fact("route") or (127, "not probed")
    if rc == 0 and out:
        return Line(NODE, "default route", Status.OK, _first(out))
    none = f"none ({_last(out) or 'empty'})"
    if offline:
        return Line(NODE, "default route", Status.OK,
                    f"{none}; execution.offline is set: the job fetches nothing from the node")
    # Many sites' compute nodes have no route out. A multi-node job finds its addresses by the
    # route to its head node, not by a default route; what fails is fetching at run time.
    return Line(NODE, "default route", Status.WARNING,
                f"{none}: downloads from the node (model weights from a hub, docker:// images) "
                "will fail", "set execution.offline=true and `hpceval stage` the model and "
                "images on the login node first")


def _export_line(fact: Callable[[str], tuple[int, str] | None]) -> Line:
    rc, out = fact("export_env") or (127, "not probed")
    if rc != 0:
        return Line(NODE, "job environment", Status.WARNING, f"not probed: {_last(out)}")
    mode = out.split(",", 1)[0].upper()
    if mode not in ("NONE", "NIL"):
        return Line(NODE, "job environment", Status.OK,
                    f"{EXPORT_SETTING}={out or '(unset)'}: the job gets the submit shell's "
                    "environment")
    # hpceval's own steps pass --export=ALL, so they see the batch shell's environment; that
    # shell starts from the login environment (NONE) or from nothing (NIL), not the submit shell
    return Line(NODE, "job environment", Status.WARNING,
                f"{EXPORT_SETTING}={out} ({SUBMIT_EXPORT} of the site or yours): the job does not "
                "get the submit shell's PATH or variables",
                "load what the job runs (vllm, harnesses) with execution.modules or "
                f"execution.pre_commands, or submit with {SUBMIT_EXPORT}=ALL")


def _network_lines(fact: Callable[[str], tuple[int, str] | None],
                   target: NetTarget | None) -> list[Line]:
    if target is None:
        return [Line(NODE, "outbound network", Status.OK, "not tried: the profile names no "
                     "proxy or external URL (--network-target HOST:PORT tries one)")]
    rc, out = fact("network") or (127, "not probed")
    proxies = (fact("proxy_vars") or (0, ""))[1]
    where = f"{target.host}:{target.port} ({target.why})"
    if rc == 0:
        return [Line(NODE, "outbound network", Status.OK, f"reached {where}")]
    if proxies:
        fix = f"the node has {proxies} set but still cannot connect: ask the admins"
    else:
        fix = (f"export https_proxy/http_proxy before submitting ({SUBMIT} passes them), or set "
               "execution.offline=true and `hpceval stage` what the run needs")
    return [Line(NODE, "outbound network", Status.PROBLEM,
                 f"cannot reach {where}: {_last(out) or f'exit {rc}'}", fix)]


def _ports_line(fact: Callable[[str], tuple[int, str] | None], first: int) -> Line:
    taken = {int(p) for p in (fact("listening") or (0, ""))[1].split() if p.isdigit()}
    bounds = (fact("port_range") or (0, ""))[1].split()
    free = sum(1 for p in range(first, EPHEMERAL_FIRST) if p not in taken)
    detail = f"{free} of {max(EPHEMERAL_FIRST - first, 0)} ports free in {first}-" \
             f"{EPHEMERAL_FIRST - 1}"
    if free == 0:
        return Line(NODE, "free ports", Status.PROBLEM, detail,
                    f"set deployment.port lower than {first}")
    if len(bounds) == 2 and bounds[0].isdigit() and int(bounds[0]) < EPHEMERAL_FIRST:
        return Line(NODE, "free ports", Status.WARNING, f"{detail}; the ephemeral range starts "
                    f"at {bounds[0]}, so outgoing connections may take a job's port",
                    f"keep deployment.port below {bounds[0]}, or ask for "
                    "net.ipv4.ip_local_port_range to start at 32768")
    return Line(NODE, "free ports", Status.OK, detail)


def _first(text: str) -> str:
    return text.splitlines()[0] if text else ""


def _last(text: str) -> str:
    rows = [row for row in text.splitlines() if row.strip()]
    return rows[-1] if rows else ""
