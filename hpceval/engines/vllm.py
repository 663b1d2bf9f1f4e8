"""deployment.type vllm: ``vllm serve``, multi-node natively (headless ranks) or on Ray."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import var

if TYPE_CHECKING:
    from hpceval.config.schema import DeploymentSpec


@register
class Vllm(Engine):
    name = "vllm"
    order = 1
    template = "deployment/vllm.j2"
    # vLLM binds its port before loading and logs this after
    ready_line = "Starting vLLM server on "
    token_env = "VLLM_API_KEY"
    command_word = "vllm"

    def uses_ray(self, dep: DeploymentSpec, nnodes: int) -> bool:
        return nnodes > 1 and dep.multi_node_backend == "ray"

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        dep = server.dep
        argv: list[Any] = ["vllm", "serve", model_source(server),
                           "--served-model-name", served_name(server),
                           "--tensor-parallel-size", dep.tensor_parallel_size,
                           "--pipeline-parallel-size", dep.pipeline_parallel_size,
                           "--gpu-memory-utilization", str(dep.gpu_memory_utilization),
                           # lm-eval's API models tokenize through /tokenize and
                           # /tokenizer_info; without them they download a tokenizer from the
                           # hub, which offline compute nodes cannot do.
                           "--enable-tokenizer-info-endpoint"]
        if dep.max_model_len is not None:
            argv += ["--max-model-len", dep.max_model_len]
        if self.uses_ray(dep, nnodes):
            argv += ["--distributed-executor-backend", "ray"]
        elif nnodes > 1:  # vLLM's own multi-node (multiprocessing): no Ray cluster to manage
            argv += ["--nnodes", nnodes, "--node-rank", rank, "--master-addr", var("HEAD_NODE"),
                     "--master-port", var("COORD_PORT")]
            if rank > 0:
                return [*argv, "--headless", *dep.extra_args]
        return [*argv, "--port", var("PORT"), *dep.extra_args]
