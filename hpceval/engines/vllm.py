"""deployment.type vllm: ``vllm serve``, multi-node natively (headless ranks) or on Ray."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import var

# The vLLM release whose `vllm serve` parser the rendered command lines are checked against
# (scripts/check-vllm-args.py; scripts/vllm/install.sh installs it); see docs/rendering.md.
VLLM_VERSION = "0.32.0"

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


# The vLLM release of a vllm-openai image, from its tag or a staged file named after it
# (vllm-openai_v0.32.0.sif): the flags above are checked against VLLM_VERSION's parser only.
IMAGE_TAG = re.compile(r"vllm-openai[:_]v?(\d+)\.(\d+)(?:\.(\d+))?")
# The first release with a flag every vLLM job renders, where a source says so:
# --enable-tokenizer-info-endpoint came with vllm-project/vllm#20575 (opened 2025-07-07, the
# day before 0.9.2), so no release before 0.10.0 has it.
FLAG_SINCE = {"--enable-tokenizer-info-endpoint": (0, 10, 0)}


def image_version(image: str | None) -> tuple[int, int, int] | None:
    match = IMAGE_TAG.search(image or "")
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)
