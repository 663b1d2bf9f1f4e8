"""GPU arithmetic: every GPU used, or a refusal with the numbers."""

from __future__ import annotations

import re

import pytest

from hpceval.config import ConfigError, load_config
from hpceval.config.layout import Layout

BASE = ["execution.output_dir=/runs", "evaluation.tasks=[ifeval]",
        "deployment.type=vllm", "deployment.runtime=host", "deployment.checkpoint_path=/m",
        "deployment.served_model_name=m"]


def layout(*extra: str) -> Layout:
    return load_config(None, [*BASE, *extra]).layout


@pytest.mark.parametrize(("nodes", "gpus", "tp", "pp", "expected"), [
    (1, 8, 1, 1, Layout(8, 1, 1, 8)),
    (2, 8, 2, 1, Layout(8, 2, 1, 4)),     # the example: 8 instances, not 1
    (1, 8, 8, 1, Layout(1, 8, 1, 1)),
    (2, 8, 8, 2, Layout(1, 16, 2, 1)),    # one instance across two nodes
    (4, 8, 16, 1, Layout(2, 16, 2, 1)),
    (2, 4, 2, 2, Layout(2, 4, 1, 1)),
])
def test_layouts(nodes: int, gpus: int, tp: int, pp: int, expected: Layout) -> None:
    got = layout(f"execution.nodes={nodes}", f"execution.gpus_per_node={gpus}",
                 f"deployment.tensor_parallel_size={tp}", f"deployment.pipeline_parallel_size={pp}")
    assert got == expected


@pytest.mark.parametrize(("extra", "message"), [
    (["execution.gpus_per_node=8", "deployment.tensor_parallel_size=3"], "leaves 2 GPU(s) idle"),
    (["execution.gpus_per_node=8", "deployment.tensor_parallel_size=12"], "not a whole number"),
    (["execution.nodes=3", "execution.gpus_per_node=8", "deployment.tensor_parallel_size=16"],
     "3 is not a multiple of 2"),
    (["execution.nodes=2", "execution.gpus_per_node=8", "deployment.tensor_parallel_size=2",
      "deployment.data_parallel_size=9"], "makes 8 instances (18 of 16 GPUs would be needed)"),
    (["execution.gpus_per_node=8", "deployment.data_parallel_size_local=9"], "do not fit"),
    (["execution.nodes=2", "execution.gpus_per_node=8", "deployment.data_parallel_size_local=8",
      "deployment.data_parallel_size=2"], "data_parallel_size_local=8 on 2 node(s) makes 16"),
    # too FEW instances, and no smaller allocation fits 3: refused, not silently retiled
    (["execution.nodes=2", "execution.gpus_per_node=8", "deployment.data_parallel_size=3"],
     "is 3, but 2 node(s) x 8 GPUs with TP=1 x PP=1 = 1 GPUs per instance makes 16 instances "
     "(3 of 16 GPUs would be used)"),
])
def test_refusals_carry_the_numbers(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        layout(*extra)


def test_cpu_command_server_one_instance_per_node() -> None:
    r = load_config(None, ["execution.output_dir=/runs", "evaluation.tasks=[ifeval]",
                           "deployment.type=command", "deployment.command=srv",
                           "deployment.runtime=host",
                           "deployment.served_model_name=m", "execution.nodes=2",
                           "execution.gpus_per_node=0"])
    assert r.layout == Layout(2, 0, 1, 1)


def test_external_endpoint_runs_no_server() -> None:
    r = load_config(None, ["execution.output_dir=/runs", "evaluation.tasks=[ifeval]",
                           "target.api_endpoint.url=https://api.example.com/v1",
                           "target.api_endpoint.model_id=m"])
    assert not r.layout.serves


@pytest.mark.parametrize(("extra", "nodes", "gpus", "instances"), [
    # TP=2, DP=1 on an 8-GPU node: one instance on the 2 GPUs it uses, not 4 instances.
    (["execution.gpus_per_node=8", "deployment.tensor_parallel_size=2",
      "deployment.data_parallel_size=1"], 1, 2, 1),
    (["execution.nodes=2", "execution.gpus_per_node=8", "deployment.data_parallel_size=4"],
     2, 2, 4),
    (["execution.nodes=2", "execution.gpus_per_node=8", "deployment.data_parallel_size=1"],
     1, 1, 1),
    (["execution.nodes=4", "execution.gpus_per_node=8", "deployment.tensor_parallel_size=16",
      "deployment.data_parallel_size=1"], 2, 8, 1),
    (["execution.nodes=2", "execution.gpus_per_node=8",
      "deployment.data_parallel_size_local=4"], 2, 4, 8),
])
def test_explicit_smaller_dp_requests_only_what_it_uses(extra: list[str], nodes: int, gpus: int,
                                                        instances: int) -> None:
    r = load_config(None, [*BASE, *extra])
    assert (r.spec.execution.nodes, r.spec.execution.gpus_per_node) == (nodes, gpus)
    assert r.layout.instances == instances
    assert any("requesting" in n and "remove data_parallel_size" in n for n in r.composed.notes)


def test_full_node_default_when_dp_is_not_written() -> None:
    r = load_config(None, [*BASE, "execution.gpus_per_node=8", "deployment.tensor_parallel_size=2"])
    assert (r.spec.execution.gpus_per_node, r.layout.instances) == (8, 4)
    assert not any("requesting" in n for n in r.composed.notes)
