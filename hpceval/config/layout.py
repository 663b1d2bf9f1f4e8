"""GPU arithmetic: how server instances tile the allocation.

Every GPU of the allocation is used: 2 nodes x 8 GPUs with TP=2 gives 8 instances, not 1.
Layouts that leave GPUs idle or do not fit are refused with the numbers in the message. An
explicit data_parallel_size (or data_parallel_size_local) that needs less than the allocation
is honoured instead: fit_explicit_layout shrinks the request to what it uses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hpceval.backends import backend_for
from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import RunSpec
from hpceval.engines import engine_for


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
    engine = engine_for(dep.type)
    if not engine.serves:
        return Layout(0, 0, 0, 0), []
    need = engine.gpu_need(dep, per_node)
    what = engine.need_text(dep, need, "deployment")
    if engine.parallel and per_node == 0:
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


def fit_explicit_layout(spec: RunSpec) -> tuple[RunSpec, list[str], list[ConfigIssue]]:
    """An explicit data_parallel_size (or data_parallel_size_local) smaller than the allocation
    is honoured: the job requests only the GPUs (or nodes) it uses, and a note says so. With
    nothing written, compute_layout fills the allocation."""
    ex, dep = spec.execution, spec.deployment
    if not engine_for(dep.type).parallel:  # only TP x PP tiles leave a smaller request
        return spec, [], []
    need = dep.tensor_parallel_size * dep.pipeline_parallel_size
    nodes, per_node = ex.nodes, ex.gpus_per_node
    what = f"TP={dep.tensor_parallel_size} x PP={dep.pipeline_parallel_size} = {need} GPUs"
    if need > per_node * nodes and not backend_for(ex.type).multi_node:  # "add nodes" won't do
        return spec, [], [ConfigIssue(
            "execution.gpus_per_node", f"is {per_node} (GPUs of this machine, from the local "
            f"profile), but one instance needs {what}",
            "pass -o execution.gpus_per_node=<GPUs this machine has>")]
    if per_node == 0 or need == 0:
        return spec, [], []
    dp, local = dep.data_parallel_size, dep.data_parallel_size_local
    if local is not None and need <= per_node:
        if local * need > per_node:
            return spec, [], [ConfigIssue(
                "deployment.data_parallel_size_local", f"{local} instances x {what} do not fit "
                f"on a {per_node}-GPU node", f"use at most {per_node // need}")]
        if dp is not None and dp != local * nodes:
            return spec, [], [ConfigIssue(
                "deployment.data_parallel_size", f"is {dp}, but data_parallel_size_local={local} "
                f"on {nodes} node(s) makes {local * nodes} instances",
                f"set deployment.data_parallel_size={local * nodes} (or remove it), or change "
                "data_parallel_size_local")]
        dp = local * nodes
    if dp is None:
        return spec, [], []
    new_nodes, new_gpus = nodes, per_node
    if need <= per_node and dp * need < nodes * per_node:
        if dp < nodes:
            new_nodes, new_gpus = dp, need
        elif dp % nodes == 0:
            new_gpus = dp // nodes * need
    elif need > per_node and need % per_node == 0 and dp * (need // per_node) < nodes:
        new_nodes = dp * (need // per_node)
    if (new_nodes, new_gpus) == (nodes, per_node):
        return spec, [], []
    note = (f"deployment.data_parallel_size={dp} with {what} per instance uses "
            f"{dp * need} GPU(s): requesting {new_nodes} node(s) x {new_gpus} GPU(s) instead of "
            f"{nodes} x {per_node} (remove data_parallel_size to fill the allocation)")
    execution = dataclasses.replace(ex, nodes=new_nodes, gpus_per_node=new_gpus)
    deployment = dataclasses.replace(dep, data_parallel_size=dp)
    return dataclasses.replace(spec, execution=execution, deployment=deployment), [note], []
