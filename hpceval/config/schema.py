"""The run configuration schema: four sections named as in NeMo Evaluator's launcher.

The dataclasses below are the single source of truth: validation, `config show` and the docs
all read the field types, defaults and help texts from here. A validated config is one frozen
``RunSpec``; nothing downstream sees raw dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, Literal

from hpceval.backends import BACKENDS
from hpceval.config.export_spec import ExportSpec as ExportSpec
from hpceval.engines import engine_for, engine_names
from hpceval.fields import REQUIRED as REQUIRED
from hpceval.fields import key as key
from hpceval.interceptors import Interceptor, chain_of, spec_fields
from hpceval.runtimes import IMAGE, PLACES, from_image, runtime_for, runtime_names

GpuRequest = Literal["gpus-per-node", "gres", "none"]
MultiNodeBackend = Literal["ray", "native"]
EndpointType = Literal["chat", "completions", "vlm", "embedding"]
AuxiliaryScope = Literal["job", "sweep"]
OverlapLoad = Literal["auto", True, False]
Umask = Literal["0027", "0077", "0007", "0022", "0002"]
# The choices of deployment.type, execution.type and execution.container_runtime are the
# registries' names (hpceval.engines, hpceval.backends, hpceval.runtimes): a new engine, backend
# or runtime is a new module there (or another package's entry point), not an edit here.
# mypy sees plain strings; the builder sees (and checks) the Literal.
# deployment.runtime's words are the runtime registry's too (hpceval.runtimes.PLACES).
if TYPE_CHECKING:
    ContainerRuntime = str
    DeploymentType = str
    ExecutionType = str
    ServerRuntime = str
else:
    ContainerRuntime = Literal[runtime_names()]
    ExecutionType = Literal[BACKENDS.names()]
    DeploymentType = Literal[engine_names()]
    ServerRuntime = Literal[PLACES]


# key() and REQUIRED live in the leaf hpceval.fields (the interceptors declare keys too).


@dataclass(frozen=True)
class ExecutionSpec:
    type: ExecutionType = key("slurm", "slurm submits to the Slurm scheduler; local runs the "
                                       "same job here")
    profile: str | None = key(None, "name of the site profile this section came from")
    hostname: str | None = key(
        None, "login node that submits (NeMo Evaluator's key); hpceval does not ssh, so submit "
        "refuses to run on another machine"
    )
    partition: str | None = key(None, "Slurm partition (--partition)")
    cpu_partition: str | None = key(
        None, "partition of the CPU-only jobs (aggregation, export, a watch's tick); null: "
        "partition (some sites refuse GPU-partition jobs that ask for no GPU)")
    account: str | None = key(None, "Slurm account to charge (--account)")
    qos: str | None = key(None, "Slurm quality of service (--qos)")
    reservation: str | None = key(None, "Slurm reservation (--reservation)")
    constraint: str | None = key(None, "node features (--constraint), e.g. 'h100&ib'")
    walltime: str = key("04:00:00", "time limit per allocation: [D-]HH:MM:SS or minutes")
    max_walltime: str = key("48:00:00", "cap on the total time of a resumed chain of jobs")
    auto_resume: bool = key(True, "continue in a new allocation after timeout, preemption or "
                            "a node failure")
    node_failure_retries: int = key(
        2, "with auto_resume: times Slurm reruns a job whose node failed (NODE_FAIL, --requeue) "
        "before it stays failed; 0: never (then `hpceval resume`)", minimum=0)
    signal_seconds: int = key(
        300, "send USR1 this many seconds before the walltime so work is saved", minimum=30
    )
    nodes: int = key(1, "nodes per model (one allocation serves all tasks of a model)", minimum=1)
    gpus_per_node: int = key(8, "GPUs on each node of the allocation (local profile: auto, "
                             "the GPUs this machine has)", minimum=0)
    gpu_request: GpuRequest = key(
        "gpus-per-node", "how GPUs are requested: --gpus-per-node=N, --gres=gpu[:type]:N, or not"
    )
    gpu_type: str | None = key(None, "GPU type for the request, e.g. a100 (gres or gpus-per-node)")
    cpus_per_task: int | None = key(None, "CPUs for the job's main task (--cpus-per-task)")
    mem: str | None = key(None, "memory per node (--mem), e.g. 0 (all) or 480G")
    exclusive: bool = key(False, "request whole nodes (--exclusive)")
    cpus_per_gpu: int | None = key(
        8, "--cpus-per-gpu when GPUs are requested and cpus_per_task is null (Slurm's default "
        "is one CPU for the whole job where the site sets no DefCpuPerGPU); null: none",
        minimum=1)
    mem_per_gpu: str | None = key(
        "64G", "--mem-per-gpu when GPUs are requested and mem is null (exclusive jobs get "
        "--mem=0, all of the node, instead); null: the site's default memory")
    job_name: str | None = key(None, "job name; default hpceval-<model>")
    sbatch_comment: str | None = key(None, "--comment, e.g. to exempt long loads from reapers")
    sbatch_extra_flags: dict[str, Any] = key(
        {}, "more #SBATCH flags: {flag: value}; true gives a bare flag, false/null omits it "
        "(not comment: see sbatch_comment)"
    )
    output_dir: str = key(REQUIRED, "run directories go here; must be on storage the nodes share")
    container_runtime: ContainerRuntime = key(
        "apptainer", "runs harness (and server) images: "
        + " | ".join(runtime_for(n).summary or n for n in runtime_names())
        + " (a local run's auto: docker, or podman without docker, when it serves its model "
          "from an image, as NeMo Evaluator's local executor; else none)"
    )
    image_dir: str | None = key(
        None, "folder of pre-built images, SIF (.sqsh for pyxis); see `hpceval stage`")
    hf_cache_dir: str | None = key(None, "shared Hugging Face cache bound into containers")
    compile_cache: bool = key(
        True, "host servers' compile caches (torch.compile, Inductor, Triton) persist per model "
        "across jobs: a resume, a successor or the next sweep element starts warm; false: "
        "every server compiles from cold")
    compile_cache_dir: str | None = key(
        None, "where they persist: a folder of yours on storage the nodes share (e.g. "
        "$SCRATCH/hpceval-compile, shared by all your runs); default: the run's compile-cache")
    dataset_dir: str | None = key(None, "shared folder of staged datasets bound into containers")
    extra_binds: list[str] = key([], "more container binds, 'src[:dst[:opts]]'")
    container_options: list[str] = key(
        [], "words after `docker/podman run` (or `ch-run`) that the site or a sandbox needs, "
        "e.g. [--runtime, runc, --ulimit, host]; charliecloud >= 0.36: [--write-fake]")
    container_gpu_flags: list[str] = key(
        ["--gpus", "all"], "how docker/podman give a container GPUs: [--gpus, all] (NVIDIA "
        "runtime) or [--device, nvidia.com/gpu=all] (CDI)")
    module_init: list[str] = key(
        [], "shell lines run verbatim before the module loads, e.g. 'source "
        "/etc/profile.d/lmod.sh' where batch shells have no module function")
    modules: list[str] = key([], "environment modules loaded before anything runs; a failed "
                             "load fails the job, naming the module")
    pre_commands: list[str] = key(
        [], "shell lines run verbatim in the job preamble (site admin code, not quoted)"
    )
    env_vars: dict[str, str] = key({}, "environment for the whole job (literal values)")
    offline: bool = key(False, "compute nodes have no internet: set HF_*_OFFLINE in harnesses")
    array_parallelism: int | None = key(None, "max array elements running at once (sweeps)")
    python: str | None = key(None, "Python on shared storage that runs the in-job runtime")
    umask: Umask = key(
        "0027", "umask for what hpceval and its jobs write (run dirs, results, caches): 0027"
        " group-readable, not world-readable; 0077 private; 0022 world-readable. Nothing in a"
        " run directory is ever writable by group or others: 0007 acts as 0027, 0002 as 0022"
    )


@dataclass(frozen=True)
class DeploymentSpec:
    type: DeploymentType = key(
        "none", " | ".join(engine_for(n).summary or n for n in engine_names()))
    checkpoint_path: str | None = key(None, "model directory on shared storage")
    hf_model_handle: str | None = key(None, "Hugging Face model id (from the shared HF cache)")
    served_model_name: str | None = key(None, "model name the server answers to")
    tensor_parallel_size: int = key(1, "GPUs one model copy is split across (TP)", minimum=1)
    pipeline_parallel_size: int = key(1, "pipeline stages of one model copy (PP)", minimum=1)
    data_parallel_size: int | None = key(
        None, "independent server instances; default fills every GPU of the allocation, a "
        "smaller number requests only the GPUs it uses"
    )
    data_parallel_size_local: int | None = key(
        None, "instances on each node (NeMo Evaluator's DP ranks per node); default fills it",
        minimum=1,
    )
    gpus_per_instance: int | None = key(
        None, "command deployments: GPUs per instance (vllm/sglang use TP x PP)"
    )
    multi_node_backend: MultiNodeBackend = key(
        "native", "how one instance spans nodes: native (vLLM/SGLang --nnodes, headless workers; "
        "no Ray) or ray (Ray head + workers, vLLM only)"
    )
    max_model_len: int | None = key(None, "context length the server allocates for")
    gpu_memory_utilization: float = key(0.9, "fraction of GPU memory the server may use",
                                        minimum=0.0, maximum=1.0)
    port: int = key(8000, "first server port on each node (instances count up)", minimum=1024,
                    maximum=65535)
    extra_args: list[str] = key([], "more server arguments, one list item per argument")
    env_vars: dict[str, str] = key({}, "environment for the server processes (literal values)")
    image: str | None = key(None, "server image: a .sif path or docker:// reference")
    runtime: ServerRuntime = key(IMAGE, "run the server from the image or from the host")
    command: str | None = key(None, "command deployments: the server command ($PORT is set)")
    unix_socket: bool = key(
        True, "vLLM from the host: each single-node instance on the job's first node listens "
        "on a Unix socket in a 0700 folder of the job, not on a port anyone could take; false: "
        "a port"
    )
    health_path: str = key("/health", "path polled until the server answers")
    health_timeout: int = key(
        3600, "seconds to wait for servers to load (large checkpoints take 40+ min)", minimum=10
    )

    @property
    def serves_from_image(self) -> bool:
        """Whether its servers start from ``image`` in the run's container runtime: an engine
        that serves something (not an external endpoint) with runtime container. The one
        reading of deployment.runtime: render, the checks and staging all ask this."""
        return engine_for(self.type).serves and from_image(self.runtime)


@dataclass(frozen=True)
class AuxiliaryDeploymentSpec(DeploymentSpec):
    """A second model the tasks call (a judge, a guard model): NeMo Evaluator's
    ``auxiliary_deployments.<name>``. Served by the same machinery as the model under test, or
    an external endpoint (type none + url). Tasks reach it through references in their params
    and environment: ``auxiliary_deployments.<name>.chat_url`` (and ``.completions_url``,
    ``.url``, ``.model_id``), resolved to an in-job proxy in front of it."""

    num_nodes: int = key(
        1, "nodes of its own (scope job: added to the job's nodes); 0: GPUs of the model's "
        "node beside the model, which then gets the rest of that node", minimum=0
    )
    num_instances: int | None = key(
        None, "NeMo Evaluator's name for data_parallel_size (independent server instances)",
        minimum=1,
    )
    scope: AuxiliaryScope = key(
        "job", "job: served inside each model's job; sweep: one job of its own for the whole "
        "sweep, which every model's job uses (the judge loads once)"
    )
    url: str | None = key(None, "an external endpoint's URL (type none): nothing is served")
    model_id: str | None = key(None, "model name sent to it; default served_model_name")
    api_key_name: str | None = key(
        None, "external endpoint: NAME of the environment variable holding its API key"
    )
    env_prefix: str | None = key(
        None, "prefix of the variables tasks see (<PREFIX>_CHAT_URL, <PREFIX>_MODEL_ID); "
        "default the name in capitals"
    )

    # The model-name rule, in its two directions (one place each): the name the server answers
    # to, and the name requests carry. Each falls back on the other key.
    @property
    def served_name(self) -> str | None:
        """The name the server answers to: served_model_name, else model_id."""
        return self.served_model_name or self.model_id

    @property
    def request_model(self) -> str | None:
        """The model name requests carry: model_id, else served_model_name."""
        return self.model_id or self.served_model_name


@dataclass(frozen=True)
class ApiEndpointSpec:
    model_id: str | None = key(None, "model name sent in requests; default served_model_name")
    url: str | None = key(None, "endpoint URL; required when deployment.type is none")
    type: EndpointType = key("chat", "chat | completions | vlm | embedding")
    api_key_name: str | None = key(
        None, "NAME of the environment variable holding the API key (never the key itself)"
    )
    proxy: bool = key(
        True, "an external endpoint gets the in-job proxy in front (its response cache lets a "
        "resumed job replay paid answers; progress; interceptors); false calls the URL directly"
    )


@dataclass(frozen=True)
class TargetSpec:
    api_endpoint: ApiEndpointSpec = field(default_factory=ApiEndpointSpec)


@dataclass(frozen=True)
class EvalParams:
    limit_samples: int | None = key(None, "evaluate only the first N samples", minimum=1)
    parallelism: int = key(16, "concurrent requests a harness sends", minimum=1)
    temperature: float | None = key(None, "sampling temperature")
    top_p: float | None = key(None, "nucleus sampling top_p")
    max_new_tokens: int | None = key(None, "generation length limit", minimum=1)
    request_timeout: int = key(600, "seconds per request", minimum=1)
    max_retries: int = key(5, "retries per failed request", minimum=0)
    num_fewshot: int | None = key(None, "few-shot examples", minimum=0)
    extra: dict[str, Any] = key({}, "harness-specific parameters, passed through")


class _InterceptorKeys:
    """What the code sees of evaluation.interceptors: its active chain. The keys themselves are
    the interceptors' own (hpceval/interceptors/, one class each), made into one frozen
    dataclass below, so config show, the builder and the docs list them as before."""

    def chain(self) -> tuple[Interceptor, ...]:
        """The active interceptors, in chain order, each built from its own keys."""
        return chain_of(self)

    @property
    def changes_requests(self) -> bool:
        return any(i.changes_requests for i in self.chain())


if TYPE_CHECKING:
    InterceptorsSpec = _InterceptorKeys
else:
    InterceptorsSpec = make_dataclass(
        "InterceptorsSpec", spec_fields(), bases=(_InterceptorKeys,), frozen=True,
        namespace={"__doc__": "What the in-job proxy changes on the way to and from the model: "
                              "the run's for every task, a task's own merged over them.",
                   "__module__": __name__})


@dataclass(frozen=True)
class TaskSpec:
    name: str = key(REQUIRED, "task name: short (ifeval) or harness.task")
    params: EvalParams = field(
        default_factory=EvalParams,
        metadata={"doc": "overrides of evaluation.params for this task (merged over them)"},
    )
    env_vars: dict[str, str] = key(
        {}, "environment for this task: literal, or host:NAME / $NAME to pass a variable by name"
    )
    container: str | None = key(None, "harness image for this task instead of the catalogue's")
    timeout: int | None = key(None, "seconds before a hung harness is stopped", minimum=1)
    infra_errors_allowed: int | None = key(
        None, "this task's own evaluation.infra_errors_allowed", minimum=0)
    allow_unlisted: bool = key(False, "run a harness.task the catalogue does not list")
    interceptors: InterceptorsSpec = field(
        default_factory=InterceptorsSpec,
        metadata={"doc": "this task's own changes (merged over evaluation.interceptors, key by "
                         "key): the in-job proxy applies them to this task's requests only"},
    )


DEFAULT_CONCURRENT_TASKS = 8  # all of a usual suite's tasks at once, against one server


@dataclass(frozen=True)
class EvaluationSpec:
    tasks: list[TaskSpec] = key(REQUIRED, "tasks to run, in order, against one server")
    params: EvalParams = field(default_factory=EvalParams)
    env_vars: dict[str, str] = key({}, "environment for every task (same forms as a task's)")
    # Concurrent by default: one after another, each harness start-up and each task's tail of
    # last requests left the model's server idle or half full while the allocation was billed.
    max_concurrent_tasks: int = key(DEFAULT_CONCURRENT_TASKS,
                                    "tasks of one model running at the same time (1: one "
                                    "after another)", minimum=1)
    # The harnesses' start-up (imports, task loading) runs beside the model load instead of
    # after it, when the ready server would wait for it (docs/benchmarks.md: most of a
    # concurrent suite's idle time). "auto" resolves per engine (Engine.tasks_start_while_loading).
    overlap_load: OverlapLoad = key("auto", "start the tasks while the model loads, the in-job "
                                    "proxy holding their requests until every instance serves: "
                                    "auto (where the model's engine answers what harnesses ask "
                                    "at start-up: vllm), true, or false (tasks start once the "
                                    "servers are ready)")
    # Default 0: a request that failed on the infrastructure was scored by the harness as a
    # wrong answer, and one run's errors moved a public score by 8 points (issue 36).
    infra_errors_allowed: int = key(0, "requests of a task that may still fail after the "
                                    "in-job proxy's retries (5xx, 429, no connection, timeout) "
                                    "with its score published; more, and the task fails as an "
                                    "infrastructure failure, which `hpceval resume` retries "
                                    "(its other answers come from the response cache)",
                                    minimum=0)
    proxy_budget: str = key("off", "in-flight requests per server instance, the rest wait in "
                            "the in-job proxy: off, adaptive (AIMD) or a fixed number")
    interceptors: InterceptorsSpec = field(
        default_factory=InterceptorsSpec,
        metadata={"doc": "request/response changes the in-job proxy applies to every task "
                         "(a task's own interceptors are merged over them)"},
    )

    def own_chain(self, task: TaskSpec) -> tuple[Interceptor, ...] | None:
        """A task's chain where it is not the run's (the task then has a route of its own on
        the in-job proxy); None where it is."""
        chain = task.interceptors.chain()
        return chain if chain != self.interceptors.chain() else None

    def infra_errors_allowed_for(self, task: TaskSpec) -> int:
        """The task's own allowance, else the run's."""
        own = task.infra_errors_allowed
        return self.infra_errors_allowed if own is None else own


@dataclass(frozen=True)
class RunSpec:
    execution: ExecutionSpec
    deployment: DeploymentSpec
    target: TargetSpec
    evaluation: EvaluationSpec
    export: ExportSpec = field(default_factory=ExportSpec)
    auxiliary_deployments: dict[str, AuxiliaryDeploymentSpec] = key(
        {}, "more models the tasks call, by name (a judge): see AuxiliaryDeploymentSpec"
    )

    # The model-name rule, in its two directions (one place each): the name the server answers
    # to, and the name requests carry. Each falls back on the other key.
    @property
    def served_name(self) -> str | None:
        """The name the server answers to: served_model_name, else model_id."""
        return self.deployment.served_model_name or self.target.api_endpoint.model_id

    @property
    def request_model(self) -> str | None:
        """The model name requests carry: model_id, else served_model_name."""
        return self.target.api_endpoint.model_id or self.deployment.served_model_name


SECTIONS = ("execution", "deployment", "target", "evaluation", "export", "auxiliary_deployments")
