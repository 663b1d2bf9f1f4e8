"""deployment.type sglang: ``python3 -m sglang.launch_server``, multi-node with --nnodes.

SGLang takes its API key only as ``--api-key`` on its command line, which ``ps`` shows to every
user of the node. So the job starts it through a launcher of a few lines (``LAUNCHER``, run as
``python3 -c``: it needs nothing but SGLang's own Python, in a container too) that takes the
job's token from the server's environment (``token_env``), adds ``--api-key`` to ``sys.argv``
inside the process and runs ``sglang.launch_server`` as ``__main__``: the process's argv in
/proc stays without it. Without the variable it refuses to start (it would serve anyone).

A single-node instance listens on its node's name only, the address the proxy reaches it at
(``HEAD_NODE``, set for every instance: ``listens_on_node``); SGLang's default, 127.0.0.1,
is not reachable from the proxy's node. A multi-node instance's head keeps 0.0.0.0 (its
ranks find each other through --dist-init-addr, not through this address).
"""

from __future__ import annotations

from typing import Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import ShellCode, var

TOKEN_ENV = "HPCEVAL_SGLANG_API_KEY"
LAUNCHER = (  # double quotes only: it is rendered as one single-quoted shell word
    "import os, runpy, sys; "
    f'key = os.environ.pop("{TOKEN_ENV}", ""); '
    f'key or sys.exit("hpceval: {TOKEN_ENV} is not set: SGLang is not started without a key"); '
    'sys.argv[:1] = ["sglang.launch_server"]; sys.argv += ["--api-key", key]; '
    'runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)')


@register
class Sglang(Engine):
    name = "sglang"
    order = 2
    template = "deployment/sglang.j2"
    command_word = "python3"
    token_env = TOKEN_ENV
    # logged once it serves (after its warm-up request, or at once with --skip-server-warmup);
    # a server that could not bind its port exits before it
    ready_line = "The server is fired up and ready to roll!"
    listens_on_node = True
    compiles = True  # torch.compile (--enable-torch-compile), Triton, FlashInfer

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        dep = server.dep
        host = ShellCode('"${HEAD_NODE}"') if nnodes == 1 else "0.0.0.0"
        argv: list[Any] = ["python3", "-c", LAUNCHER,
                           "--model-path", model_source(server),
                           "--served-model-name", served_name(server),
                           "--tp-size", dep.tensor_parallel_size,
                           "--pp-size", dep.pipeline_parallel_size,
                           "--mem-fraction-static", str(dep.gpu_memory_utilization),
                           "--host", host, "--port", var("PORT")]
        if dep.max_model_len is not None:
            argv += ["--context-length", dep.max_model_len]
        if nnodes > 1:
            argv += ["--nnodes", nnodes, "--node-rank", rank,
                     "--dist-init-addr", ShellCode('"${HEAD_NODE}:${COORD_PORT}"')]
        return [*argv, *dep.extra_args]
