"""What a serving engine is: one class declaring everything hpceval needs to know about it.

Config, render and staging ask the engine of a deployment (``engine_for(dep.type)``) instead
of testing its type: which model sources it takes, its GPU need, its command lines, the line
its log prints once it serves, how it takes the job's token, what its environment needs.
A new engine is one module in this package plus its tests (and a template partial, or it
reuses one); ``tests/engines`` holds the test that no other module tests a type by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from hpceval.errors import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from hpceval.engines.views import DeploymentView


class Server(Protocol):
    """One deployment to serve, as render.servers.Served gives it."""

    @property
    def dep(self) -> DeploymentView: ...
    @property
    def where(self) -> str: ...  # its key path: deployment | auxiliary_deployments.<name>
    @property
    def model_name(self) -> str | None: ...


def model_source(server: Server) -> str:
    dep = server.dep
    source = dep.checkpoint_path or dep.hf_model_handle
    if not source:
        raise ConfigError.at(f"{server.where}.checkpoint_path", "no model to serve",
                             f"set {server.where}.checkpoint_path or hf_model_handle")
    return source


def served_name(server: Server) -> str:
    if not server.model_name:
        raise ConfigError.at(f"{server.where}.served_model_name", "no model name for requests")
    return server.model_name


class Engine:
    """The defaults describe a server built from a model directory on GPUs; subclasses say
    what differs. Instances hold no state: one per engine, in the registry."""

    name: ClassVar[str]
    order: ClassVar[int]  # place in the schema's list of choices and its help text
    summary: ClassVar[str] = ""  # the help text's word for it (default: its name)
    template: ClassVar[str] = ""  # the job script's partial for its servers
    serves: ClassVar[bool] = True  # False: an external endpoint, nothing started in the job
    # True: exactly one of checkpoint_path and hf_model_handle is what it serves (and a
    # hf_model_handle is pre-fetched into the shared HF cache by `hpceval stage`)
    model_source: ClassVar[bool] = True
    needs_command: ClassVar[bool] = False  # True: deployment.command is the server
    parallel: ClassVar[bool] = True  # GPUs per instance are TP x PP; it needs GPUs
    multi_node: ClassVar[bool] = True  # one instance may span nodes (rank-numbered launches)
    # The line its log prints once it serves: an answer on the port before it (from anyone
    # else) is never taken for the job's server. "": the health answer alone counts.
    ready_line: ClassVar[str] = ""
    # The variable it reads the job's per-job token from (never its command line, which ps
    # shows to every user of the node); None: it takes no token.
    token_env: ClassVar[str | None] = None
    port_env: ClassVar[bool] = False  # True: its environment carries PORT
    # True: its command line names the address it listens on, "${HEAD_NODE}" (the node the
    # proxy reaches the instance at), which the job then sets for single-node instances too
    listens_on_node: ClassVar[bool] = False
    command_word: ClassVar[str | None] = None  # first word: wrapped commands break before it
    # True: it can serve HTTP on a Unix socket instead of a port (socket_argv). The job then
    # starts each single-node instance on its first node that way where the server runs from
    # the host (render/deployments.py serves_on_socket): nobody else can take the address.
    unix_socket: ClassVar[bool] = False
    # True: every instance it starts answers /tokenizer_info, /tokenize and /detokenize (the
    # routes lm-eval's remote tokenizer uses). Harness commands then name that backend
    # outright instead of letting lm-eval probe for it with a 5-s timeout at start-up, which
    # a model still loading (evaluation.overlap_load) cannot answer.
    tokenizer_routes: ClassVar[bool] = False
    # True: its servers compile (torch.compile, Triton kernels) into their cache folders, which
    # are then kept per model across jobs (execution.compile_cache; job.compile_cache)
    compiles: ClassVar[bool] = False
    # What its log reports of its load: (step, a pattern whose one group is the step's
    # seconds), read by the time ledger (results.ledger) from the head's log; () reports none
    load_steps: ClassVar[tuple[tuple[str, str], ...]] = ()

    @property
    def tasks_start_while_loading(self) -> bool:
        """evaluation.overlap_load "auto": whether its tasks start while its instances load.
        The one start-up question a shipped harness cannot wait on is lm-eval's 5-s tokenizer
        probe, which tokenizer routes let the command skip; a `command` server is the user's
        own, whose routes and load hpceval does not know."""
        return self.tokenizer_routes

    def gpu_need(self, dep: DeploymentView, default: int) -> int:
        """GPUs per instance; ``default`` when the engine's own keys leave it open."""
        if self.parallel:
            return dep.tensor_parallel_size * dep.pipeline_parallel_size
        return dep.gpus_per_instance if dep.gpus_per_instance is not None else default

    def need_text(self, dep: DeploymentView, need: int, where: str) -> str:
        """How the GPU need reads in messages (``where``: the key path its keys are under, or
        "" to name them bare)."""
        if self.parallel:
            return (f"TP={dep.tensor_parallel_size} x PP={dep.pipeline_parallel_size} = {need} "
                    "GPUs per instance")
        return f"{where}.gpus_per_instance={need}" if where else f"gpus_per_instance={need}"

    def uses_ray(self, dep: DeploymentView, nnodes: int) -> bool:
        """Whether an instance over ``nnodes`` nodes runs on a Ray cluster the job starts."""
        return False

    def image_findings(self, where: str, dep: DeploymentView, span: Callable[[], int]
                       ) -> tuple[list[str], list[ConfigIssue]]:
        """What this engine says of a deployment's image at key path ``where`` (``span()``: the
        nodes of one instance, worked out only if asked): notes, and issues that refuse the run
        (an image too old for a flag its servers are started with). Most engines read nothing
        from a tag."""
        return [], []

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        """The command line of rank ``rank`` of an instance over ``nnodes`` nodes."""
        raise NotImplementedError(f"engine {self.name} starts no server")

    def socket_argv(self, server: Server) -> list[Any]:
        """The command line of a single-node instance listening on the socket "$SOCKET" (the
        job sets it) instead of a port; engines that declare ``unix_socket`` only."""
        raise NotImplementedError(f"engine {self.name} serves on a port only")
