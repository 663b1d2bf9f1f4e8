"""GPU arithmetic: how server instances tile the allocation.

Every GPU of the allocation is used: 2 nodes x 8 GPUs with TP=2 gives 8 instances, not 1.
Layouts that leave GPUs idle or do not fit are refused with the numbers in the message.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import RunSpec


@dataclass(frozen=True)
class Layout:
    instances: int  # independent servers behind the in-job proxy
    gpus_per_instance: int  # 0 for a CPU server or an external endpoint
    nodes_per_instance: int  # > 1: one instance spans nodes (Ray or vLLM headless workers)
    instances_per_node: int  # > 1: several instances share a node, each on its own GPUs

    @property
    def serves(self) -> bool:
        return self.instances > 0


def compute_layout(spec: RunSpec) -> tuple[Layout, list[ConfigIssue]]:
    ex, dep = spec.execution, spec.deployment
    nodes, per_node = ex.nodes, ex.gpus_per_node
    if dep.type == "none":
        return Layout(0, 0, 0, 0), []
    if dep.type == "command":
        need = dep.gpus_per_instance if dep.gpus_per_instance is not None else per_node
        what = f"deployment.gpus_per_instance={need}"
    else:
        need = dep.tensor_parallel_size * dep.pipeline_parallel_size
        what = (f"TP={dep.tensor_parallel_size} x PP={dep.pipeline_parallel_size} = {need} GPUs "
                "per instance")
        if per_node == 0:
            return Layout(0, 0, 0, 0), [ConfigIssue(
                "execution.gpus_per_node", f"is 0, but a {dep.type} server needs GPUs ({what})",
                "set execution.gpus_per_node to the GPUs of your nodes")]
    alloc = f"{nodes} node(s) x {per_node} GPUs"
    if need == 0:  # a CPU server (command deployment): one instance per node by default
        instances = dep.data_parallel_size or nodes
        if instances % nodes:
            return Layout(0, 0, 0, 0), [ConfigIssue(
                "deployment.data_parallel_size", f"{instances} CPU instances do not spread "
                f"evenly over {nodes} nodes", f"use a multiple of {nodes}")]
        return Layout(instances, 0, 1, instances // nodes), []
    if need > per_node:
        if need % per_node:
            return Layout(0, 0, 0, 0), [ConfigIssue(
                "deployment", f"{what} spans nodes but is not a whole number of {per_node}-GPU "
                f"nodes", f"make TP x PP a multiple of {per_node}")]
        span = need // per_node
        if nodes % span:
            return Layout(0, 0, 0, 0), [ConfigIssue(
                "execution.nodes", f"{alloc}: an instance needs {span} nodes ({what}), and "
                f"{nodes} is not a multiple of {span}",
                f"use execution.nodes={span * max(1, nodes // span)}")]
        layout = Layout(nodes // span, need, span, 1)
    else:
        if per_node % need:
            fit = per_node // need * need
            return Layout(0, 0, 0, 0), [ConfigIssue(
                "deployment", f"{alloc} with {what} leaves {per_node - fit} GPU(s) idle on "
                "every node", f"choose TP x PP dividing {per_node}, or set "
                f"execution.gpus_per_node={fit} (a partial node)")]
        layout = Layout(nodes * (per_node // need), need, 1, per_node // need)
    if dep.data_parallel_size is not None and dep.data_parallel_size != layout.instances:
        used = dep.data_parallel_size * need
        return layout, [ConfigIssue(
            "deployment.data_parallel_size",
            f"is {dep.data_parallel_size}, but {alloc} with {what} makes {layout.instances} "
            f"instances ({used} of {nodes * per_node} GPUs would be "
            f"{'used' if used <= nodes * per_node else 'needed'})",
            f"remove it (it defaults to {layout.instances}) or change execution.nodes / "
            "execution.gpus_per_node")]
    return layout, []
