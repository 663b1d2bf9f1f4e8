"""deployment.type sglang: ``python3 -m sglang.launch_server``, multi-node with --nnodes."""

from __future__ import annotations

from typing import Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import ShellCode, var


@register
class Sglang(Engine):
    name = "sglang"
    order = 2
    template = "deployment/sglang.j2"
    command_word = "python3"

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        dep = server.dep
        argv: list[Any] = ["python3", "-m", "sglang.launch_server",
                           "--model-path", model_source(server),
                           "--served-model-name", served_name(server),
                           "--tp-size", dep.tensor_parallel_size,
                           "--pp-size", dep.pipeline_parallel_size,
                           "--mem-fraction-static", str(dep.gpu_memory_utilization),
                           # SGLang listens on 127.0.0.1 by default; the proxy is on another node
                           "--host", "0.0.0.0", "--port", var("PORT")]
        if dep.max_model_len is not None:
            argv += ["--context-length", dep.max_model_len]
        if nnodes > 1:
            argv += ["--nnodes", nnodes, "--node-rank", rank,
                     "--dist-init-addr", ShellCode('"${HEAD_NODE}:${COORD_PORT}"')]
        return [*argv, *dep.extra_args]
