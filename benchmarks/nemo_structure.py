"""Structural figures read from rendered job scripts: jobs, sbatch calls, model loads, GPUs.

Pure text analysis, shared by benchmarks/nemo_compare.py (both tools) and
tests/benchmarks/test_nemo_structure.py (the hpceval side, so a rendering change that costs
extra jobs, model loads or idle GPUs fails a unit test). Nothing here runs Slurm.

What each count means, for either tool:

- submit_sbatch: sbatch calls made when the run is submitted;
- jobs: allocations the scheduler starts (each array element counts);
- start_sbatch: sbatch calls every job makes unconditionally (a line at column 0, outside any
  function or branch), i.e. even when nothing goes wrong;
- server_starts: model server instances launched, over all jobs (each loads the model);
- replicas: model copies serving requests (instances x vLLM's own data-parallel size);
- gpus_allocated / gpus_serving: GPUs requested by the jobs / given to a serving replica.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TASK_MARK = re.compile(r"^=+ Task \d+ =+\s*$", re.M)
TOP_LEVEL_SBATCH = re.compile(r"^sbatch\s", re.M)
SBATCH_NODES = re.compile(r"^#SBATCH --nodes[= ](\d+)", re.M)
SBATCH_GPUS = re.compile(
    r"^#SBATCH (?:--gpus-per-node[= ](?:\w+:)?(\d+)|--gres[= ]gpu:(?:\w+:)?(\d+))", re.M)
SBATCH_ARRAY = re.compile(r"^#SBATCH --array[= ](\d+)-(\d+)", re.M)
# hpceval: `launch_server INSTANCE ROLE NODE PEER GPU_FIRST GPU_COUNT ...` (templates/deployment/)
HPCEVAL_LAUNCH = re.compile(r"^launch_server (\d+) (\w+) \S+ \S+ \d+ (\d+)", re.M)
# launcher 0.2.x: one `srun ... bash -c '... echo "<b64>" | base64 -d > deployment_cmd.sh ...'`
# inside `for ((g=0; g<N; g++))`, N = execution.num_instances
NEL_INSTANCE_LOOP = re.compile(r"^for \(\(g=0; g<(\d+); g\+\+\)\); do$", re.M)
NEL_SERVER_SRUN = re.compile(
    r"^\s*srun .*--nodes (\d+) .*echo \"([A-Za-z0-9+/=]+)\" \| base64 -d > deployment_cmd\.sh",
    re.M)


@dataclass(frozen=True)
class Structure:
    submit_sbatch: int
    jobs: int
    start_sbatch: int
    server_starts: int
    replicas: int | None
    gpus_allocated: int
    gpus_serving: int | None


def header_gpus(script: str) -> int:
    """GPUs a job script requests: nodes x GPUs per node from its #SBATCH lines."""
    nodes = SBATCH_NODES.search(script)
    gpus = SBATCH_GPUS.search(script)
    if gpus is None:
        return 0
    return (int(nodes.group(1)) if nodes else 1) * int(gpus.group(1) or gpus.group(2))


def array_size(script: str) -> int:
    match = SBATCH_ARRAY.search(script)
    return int(match.group(2)) - int(match.group(1)) + 1 if match else 1


def model_parallel(command: str) -> int:
    """GPUs one model copy needs: TP x PP of a `vllm serve` / SGLang command (1 if absent)."""
    def flag(*names: str) -> int:
        for name in names:
            match = re.search(rf"--{name}[= ](\d+)", command)
            if match:
                return int(match.group(1))
        return 1

    return flag("tensor-parallel-size", "tp-size") * flag("pipeline-parallel-size", "pp-size")


def hpceval_model_figures(script: str) -> tuple[int, int]:
    """(server instances, GPUs serving) of one hpceval model job script.

    A process gets GPU_COUNT GPUs of its node, or all of them when GPU_COUNT is 0; an instance
    serves with min(TP x PP of its command, the GPUs its processes got).
    """
    nodes = SBATCH_NODES.search(script)
    node_gpus = header_gpus(script) // int(nodes.group(1) if nodes else 1)
    launches = list(HPCEVAL_LAUNCH.finditer(script))
    given: dict[str, int] = {}
    needs: dict[str, int] = {}
    for i, match in enumerate(launches):
        instance, role, count = match.groups()
        given[instance] = given.get(instance, 0) + (int(count) or node_gpus)
        if role == "head":
            stop = launches[i + 1].start() if i + 1 < len(launches) else len(script)
            needs[instance] = model_parallel(script[match.end():stop])
    return len(needs), sum(min(needs[i], given[i]) for i in needs)


def hpceval_structure(run_file: Path, overrides: tuple[str, ...] = ()) -> Structure:
    """Render a run file the way `hpceval submit` would (nothing written) and count."""
    from hpceval.config import load_run
    from hpceval.runs.rundir import prepare_run

    run = prepare_run(load_run(run_file, list(overrides), check_environment=False),
                      invocation_id="bench-structure")
    models = [run.scripts[m.script_name] for m in run.models]
    # submit_prepared: sbatch of the pull job's script if any (the run's unstaged images,
    # before any GPU job), of the entry script, then of the aggregation script if any
    extra = (run.pull is not None) + (run.aggregate is not None)
    submit_sbatch = 1 + extra
    jobs = array_size(run.script) + extra
    figures = [hpceval_model_figures(s) for s in models]
    return Structure(
        submit_sbatch=submit_sbatch,
        jobs=jobs,
        start_sbatch=sum(len(TOP_LEVEL_SBATCH.findall(s)) for s in run.scripts.values()),
        server_starts=sum(n for n, _ in figures),
        replicas=sum(n for n, _ in figures),  # hpceval runs no vLLM-internal DP
        gpus_allocated=sum(header_gpus(s) for s in models),
        gpus_serving=sum(g for _, g in figures))


def nel_task_scripts(dry_run_stdout: str) -> list[str]:
    """The run.sub scripts printed by `nemo-evaluator-launcher run --dry-run` (Slurm)."""
    text = ANSI.sub("", dry_run_stdout)
    return [part for part in TASK_MARK.split(text)[1:] if "#SBATCH" in part]


def vllm_parallelism(command: str, nodes: int = 1) -> tuple[int, int] | None:
    """(GPUs per model copy = TP x PP, copies = DP) of a `vllm serve` command run on `nodes`
    nodes, else None."""
    if "vllm serve" not in command:
        return None

    def flag(name: str) -> int:
        match = re.search(rf"--{name}[= ](\d+)", command)
        return int(match.group(1)) if match else 1

    # multi-node DP: each node's process serves its local share of the replicas
    if "--data-parallel-size-local" in command:
        return flag("tensor-parallel-size") * flag("pipeline-parallel-size"), nodes * flag(
            "data-parallel-size-local")
    dp = flag("data-parallel-size")
    return flag("tensor-parallel-size") * flag("pipeline-parallel-size"), dp


def nel_job_figures(script: str) -> tuple[int, int | None, int | None]:
    """(server instances, replicas, serving GPUs) of one launcher run.sub."""
    servers = NEL_SERVER_SRUN.findall(script)
    if not servers:
        return 0, 0, 0
    loop = NEL_INSTANCE_LOOP.search(script)
    instances = int(loop.group(1)) * len(servers) if loop else len(servers)
    nodes_per_instance, payload = servers[0]
    parallel = vllm_parallelism(base64.b64decode(payload).decode(),
                                int(nodes_per_instance))
    if parallel is None:
        return instances, None, None
    per_copy, copies = parallel
    nodes = SBATCH_NODES.search(script)
    slice_gpus = int(nodes_per_instance) * header_gpus(script) // int(nodes.group(1) if nodes
                                                                      else 1)
    # vLLM cannot use more GPUs than the instance's node slice holds
    copies = min(copies, slice_gpus // per_copy)
    return instances, instances * copies, instances * copies * per_copy


def nel_structure(dry_run_stdouts: list[str]) -> Structure:
    """Count over the dry-run outputs of one or more launcher invocations.

    The launcher's Slurm executor submits each printed run.sub with its own `sbatch`
    (`_sbatch_remote_runsubs` in executors/slurm/executor.py, 0.2.x), one job each.
    """
    scripts = [s for out in dry_run_stdouts for s in nel_task_scripts(out)]
    figures = [nel_job_figures(s) for s in scripts]
    replicas = [r for _, r, _ in figures]
    serving = [g for _, _, g in figures]
    return Structure(
        submit_sbatch=len(scripts),
        jobs=len(scripts),
        start_sbatch=sum(len(TOP_LEVEL_SBATCH.findall(s)) for s in scripts),
        server_starts=sum(n for n, _, _ in figures),
        replicas=None if None in replicas else sum(r for r in replicas if r is not None),
        gpus_allocated=sum(header_gpus(s) for s in scripts),
        gpus_serving=None if None in serving else sum(g for g in serving if g is not None))
