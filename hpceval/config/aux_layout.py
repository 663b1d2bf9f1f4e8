"""GPU arithmetic of auxiliary deployments (a judge) served inside each model's job.

Two placements (``num_nodes``):
- ``num_nodes >= 1``: nodes of its own, added to the job: #SBATCH --nodes is the model's nodes
  plus every scope-job judge's. A judge's nodes are the ones after the model's (and after the
  judges listed before it), so the last ones of the job's node list.
- ``num_nodes: 0``: a slice of the model's first node. The model must be single-node; the judge
  takes TP x PP x instances GPUs after the model's, and the model's layout uses the rest (8 GPUs:
  judge TP=2, model TP=2 gives 3 model instances on GPUs 0-5, the judge on 6-7).

Served nothing: type none (an external URL; its proxy forwards there) and scope sweep (the
sweep's own judge job serves it; the element only starts a proxy in front of it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from hpceval.config.auxiliary import IDENTIFIER, RESERVED_PREFIXES, env_prefix
from hpceval.config.errors import ConfigIssue
from hpceval.config.layout import Layout, compute_layout
from hpceval.config.schema import AuxiliaryDeploymentSpec, DeploymentSpec, RunSpec
from hpceval.engines import engine_for
from hpceval.runtimes import runtime_for


@dataclass(frozen=True)
class Placement:
    """Where one deployment's instances go in the job."""

    layout: Layout
    first_node: int = 0  # index of its first node in the job's node list
    gpu_offset: int = 0  # its first GPU on a node (a slice: after the model's GPUs)
    pin: bool = False  # pin GPUs even for one instance per node: it shares the node


NO_LAYOUT = Layout(0, 0, 0, 0)


def served_in_job(aux: AuxiliaryDeploymentSpec) -> bool:
    return engine_for(aux.type).serves and aux.scope == "job"


def server_deployments(spec: RunSpec) -> list[tuple[str, DeploymentSpec]]:
    """(key path, spec) of every deployment the run serves: the model's, and each judge's (in
    its job or the sweep's judge job), for what they need staged and checked."""
    return [("deployment", spec.deployment)] + [
        (f"auxiliary_deployments.{name}", aux)
        for name, aux in spec.auxiliary_deployments.items() if engine_for(aux.type).serves]


def job_nodes(spec: RunSpec) -> int:
    """#SBATCH --nodes: the model's nodes and each judge's own nodes (scope job)."""
    return spec.execution.nodes + sum(
        a.num_nodes for a in spec.auxiliary_deployments.values() if served_in_job(a))


def slice_gpus(spec: RunSpec) -> int:
    """GPUs of the model's first node that judges (num_nodes 0) take."""
    per_node = spec.execution.gpus_per_node
    return sum(_need(a, per_node) * _instances(a, 1)
               for a in spec.auxiliary_deployments.values()
               if served_in_job(a) and a.num_nodes == 0)


def _need(aux: AuxiliaryDeploymentSpec, per_node: int) -> int:
    # a judge with nodes of its own defaults to whole nodes, a slice of the model's to none
    return engine_for(aux.type).gpu_need(aux, per_node if aux.num_nodes else 0)


def _instances(aux: AuxiliaryDeploymentSpec, default: int) -> int:
    return aux.num_instances or aux.data_parallel_size or default


def spec_issues(spec: RunSpec) -> list[ConfigIssue]:
    """Names, keys that belong to one kind of judge only, and the GPU arithmetic."""
    issues: list[ConfigIssue] = []
    prefixes: dict[str, str] = {}
    for name, aux in spec.auxiliary_deployments.items():
        where = f"auxiliary_deployments.{name}"
        if not IDENTIFIER.match(name):
            issues.append(ConfigIssue(where, "is not a name the job can use in variable names",
                                      "use letters, digits and _, not starting with a digit"))
            continue
        prefix = env_prefix(name, aux)
        if not IDENTIFIER.match(prefix):
            issues.append(ConfigIssue(f"{where}.env_prefix", f"{prefix!r} is not a variable "
                                      "name prefix", "use letters, digits and _"))
        elif prefix.upper() in RESERVED_PREFIXES:
            issues.append(ConfigIssue(f"{where}.env_prefix", f"{prefix!r} is reserved",
                                      "choose another, e.g. " + name.upper() + "_AUX"))
        elif prefix in prefixes:
            issues.append(ConfigIssue(f"{where}.env_prefix", f"{prefix!r} is also "
                                      f"auxiliary_deployments.{prefixes[prefix]}'s",
                                      "give each its own env_prefix"))
        prefixes.setdefault(prefix, name)
        same = [other for other in spec.auxiliary_deployments
                if other != name and other.upper() == name.upper()]
        if same:
            issues.append(ConfigIssue(where, f"differs from auxiliary_deployments.{same[0]} only "
                                      "in case, and both name the same job variables",
                                      "rename one"))
        issues += _kind_issues(where, aux)
        issues += _container_issues(spec, where, aux)
    if issues:
        return issues
    from hpceval.backends import backend_for

    if not backend_for(spec.execution.type).multi_node:
        issues += [ConfigIssue(f"auxiliary_deployments.{name}.num_nodes", f"is {aux.num_nodes}, "
                               f"but execution.type {spec.execution.type} runs on this one "
                               "machine", "set num_nodes: 0 (GPUs beside the model's)")
                   for name, aux in spec.auxiliary_deployments.items()
                   if served_in_job(aux) and aux.num_nodes > 0]
    return issues + [i for _, _, found in _placements(spec) for i in found]


def _kind_issues(where: str, aux: AuxiliaryDeploymentSpec) -> list[ConfigIssue]:
    engine = engine_for(aux.type)
    if not engine.serves:
        if not aux.url:
            return [ConfigIssue(f"{where}.url", "required when its type is none (an external "
                                "endpoint)", "give the judge's URL, or type vllm/sglang/command")]
        if not aux.url.startswith(("http://", "https://")):
            return [ConfigIssue(f"{where}.url", f"{aux.url!r} is not an http(s) URL",
                                "write http(s)://host[:port]/v1")]
        if "@" in aux.url.partition("://")[2].partition("/")[0]:
            return [ConfigIssue(f"{where}.url", "carries a user:password@ part",
                                f"remove it and set {where}.api_key_name to the variable's NAME")]
        return []
    found = []
    if aux.url:
        found.append(ConfigIssue(f"{where}.url", f"is for an external endpoint, but the type "
                                 f"is {aux.type} (served in the job)", "remove url, or set "
                                 "type: none"))
    if aux.api_key_name:
        found.append(ConfigIssue(f"{where}.api_key_name", "is for an external endpoint: a "
                                 "served judge requires the job's own token",
                                 "remove it, or set type: none with url"))
    if engine.model_source and bool(aux.checkpoint_path) == bool(aux.hf_model_handle):
        found.append(ConfigIssue(f"{where}.checkpoint_path", "give exactly one of "
                                 "checkpoint_path and hf_model_handle",
                                 f"set {where}.checkpoint_path=/path/to/judge"))
    if engine.needs_command and not aux.command:
        found.append(ConfigIssue(f"{where}.command", "required when its type is command",
                                 "give the server command ($PORT is set)"))
    if not aux.served_name:
        found.append(ConfigIssue(f"{where}.served_model_name", "no model name for requests",
                                 f"set {where}.served_model_name"))
    if aux.multi_node_backend == "ray":
        found.append(ConfigIssue(f"{where}.multi_node_backend", "ray is for the model under "
                                 "test only", "use native (vLLM's own multi-node)"))
    if aux.scope == "sweep" and aux.num_nodes == 0:
        found.append(ConfigIssue(f"{where}.num_nodes", "is 0 (a slice of the model's node), "
                                 "but scope sweep runs the judge as a job of its own",
                                 "give it num_nodes >= 1, or scope: job"))
    return found


def env_issues(spec: RunSpec, environ: Mapping[str, str] | None) -> list[ConfigIssue]:
    """An external judge's key and the judges' own environment: names, and set when submitted
    (``environ`` None: not checked, as for the model's)."""
    from hpceval.config.checks import ENV_NAME, env_reference
    from hpceval.config.secret_files import from_file

    issues: list[ConfigIssue] = []
    for name, aux in spec.auxiliary_deployments.items():
        where = f"auxiliary_deployments.{name}"
        wanted: list[tuple[str, str | None]] = [(f"{where}.api_key_name", aux.api_key_name)]
        wanted += [(f"{where}.env_vars.{k}", env_reference(v)) for k, v in aux.env_vars.items()]
        for key, var in wanted:
            if var is None:
                continue
            if not ENV_NAME.match(var):
                issues.append(ConfigIssue(key, "names no valid variable",
                                          "give the NAME of the variable, never its value"))
            elif environ is not None and var not in environ and not from_file(spec, var):
                issues.append(ConfigIssue(key, f"${var} is not set", f"export {var}=... before "
                                          "submitting (the value is never stored)"))
    return issues


def _container_issues(spec: RunSpec, where: str,
                      aux: AuxiliaryDeploymentSpec) -> list[ConfigIssue]:
    """A judge served from an image: what script_checks.server_issues asks of the model's."""
    from hpceval.config.script_checks import bind_issue

    if not aux.serves_from_image:
        return []
    found = []
    if not aux.image:
        found.append(ConfigIssue(f"{where}.image", f"a {aux.type} server from a container "
                                 "needs an image", f"set {where}.image, or {where}.runtime=host"))
    if not runtime_for(spec.execution.container_runtime).containers:
        found.append(ConfigIssue(f"{where}.runtime", "is container, but execution."
                                 "container_runtime is none", f"set {where}.runtime=host, or a "
                                 "container runtime"))
    elif aux.checkpoint_path:
        issue = bind_issue(aux.checkpoint_path, f"{where}.checkpoint_path")
        found += [issue] if issue else []
    return found


def placements(spec: RunSpec) -> dict[str, Placement]:
    """Every judge served in this job, by name (the arithmetic was checked by spec_issues)."""
    return {name: placement for name, placement, _ in _placements(spec)}


def model_layout_spec(spec: RunSpec) -> RunSpec:
    """The spec the model's own layout is computed from: without the judges' slice."""
    taken = slice_gpus(spec)
    if not taken:
        return spec
    ex = spec.execution
    return dataclasses.replace(spec, execution=dataclasses.replace(
        ex, gpus_per_node=max(ex.gpus_per_node - taken, 0)))


def _placements(spec: RunSpec) -> list[tuple[str, Placement, list[ConfigIssue]]]:
    ex = spec.execution
    per_node = ex.gpus_per_node
    taken = slice_gpus(spec)
    next_node = ex.nodes
    next_gpu = per_node - taken
    out: list[tuple[str, Placement, list[ConfigIssue]]] = []
    for name, aux in spec.auxiliary_deployments.items():
        if not served_in_job(aux):
            continue
        where = f"auxiliary_deployments.{name}"
        engine = engine_for(aux.type)
        need = _need(aux, per_node)
        what = engine.need_text(aux, need, "")
        if engine.parallel and per_node == 0:
            out.append((name, Placement(NO_LAYOUT), [ConfigIssue(
                "execution.gpus_per_node", f"is 0, but {where} is a {aux.type} server ({what})",
                "set execution.gpus_per_node to the GPUs of your nodes")]))
            continue
        if aux.num_nodes == 0:
            instances = _instances(aux, 1)
            issues = _slice_issues(spec, where, need, instances, what, taken)
            layout = Layout(instances, need, 1, instances)
            out.append((name, Placement(layout, 0, next_gpu, pin=True), issues))
            next_gpu += need * instances
            continue
        layout, issues = _own_nodes_layout(spec, aux, where, need, what)
        out.append((name, Placement(layout, next_node, 0, pin=layout.instances_per_node > 1),
                    issues))
        next_node += aux.num_nodes
    return out


def _slice_issues(spec: RunSpec, where: str, need: int, instances: int, what: str,
                  taken: int) -> list[ConfigIssue]:
    ex, dep = spec.execution, spec.deployment
    per_node = ex.gpus_per_node
    if ex.nodes != 1:
        return [ConfigIssue(f"{where}.num_nodes", f"is 0 (GPUs of the model's node), but the "
                            f"model has execution.nodes={ex.nodes}", f"give {where} nodes of "
                            "its own (num_nodes: 1), or run the model on one node")]
    if need > per_node:
        return [ConfigIssue(f"{where}.num_nodes", f"is 0 (a slice of one node), but {what} is "
                            f"more than a {per_node}-GPU node",
                            f"give it nodes of its own (num_nodes: {-(-need // per_node)})")]
    model_engine = engine_for(dep.type)
    if not model_engine.serves:
        return [] if taken <= per_node else [ConfigIssue(
            f"{where}.num_instances", f"{taken} judge GPUs do not fit a {per_node}-GPU node",
            "use fewer instances or a smaller TP")]
    model_need = model_engine.gpu_need(dep, 0)
    rest = per_node - taken
    if taken > per_node or model_need > rest:
        return [ConfigIssue(f"{where}.num_nodes", f"is 0: the judge takes {taken} of the node's "
                            f"{per_node} GPUs ({instances} instance(s) x {need}), leaving {rest} "
                            f"for the model, which needs {model_need} per instance",
                            "give the judge its own node (num_nodes: 1), or reduce its TP or "
                            "num_instances")]
    return []


def _own_nodes_layout(spec: RunSpec, aux: AuxiliaryDeploymentSpec, where: str, need: int,
                      what: str) -> tuple[Layout, list[ConfigIssue]]:
    per_node, nodes = spec.execution.gpus_per_node, aux.num_nodes
    alloc = f"{nodes} node(s) x {per_node} GPUs"
    wanted = aux.num_instances or aux.data_parallel_size
    if need == 0:  # a CPU judge: one instance per node by default
        count = wanted or nodes
        if count % nodes:
            return NO_LAYOUT, [ConfigIssue(f"{where}.num_instances", f"{count} CPU instances do "
                                           f"not spread evenly over {nodes} node(s)",
                                           f"use a multiple of {nodes}")]
        return Layout(count, 0, 1, count // nodes), []
    # The model's own arithmetic (spans, idle GPUs) on the judge's nodes, then a smaller
    # explicit instance count is honoured: its other GPUs stay idle.
    probe = dataclasses.replace(
        spec, execution=dataclasses.replace(spec.execution, nodes=nodes),
        deployment=dataclasses.replace(spec.deployment, type=aux.type,
                                       tensor_parallel_size=aux.tensor_parallel_size,
                                       pipeline_parallel_size=aux.pipeline_parallel_size,
                                       gpus_per_instance=need, data_parallel_size=None))
    layout, issues = compute_layout(probe)
    if issues and not (wanted and need <= per_node):
        return NO_LAYOUT, [ConfigIssue(f"{where}.tensor_parallel_size", f"{alloc} of its own "
                                       f"with {what}: {issues[0].message}",
                                       "choose TP x PP dividing the node's GPUs, a multiple of "
                                       "them, or num_nodes to match")]
    fill = layout.instances if not issues else nodes * (per_node // need)
    if wanted is None:
        return layout, []
    if wanted > fill:
        return NO_LAYOUT, [ConfigIssue(f"{where}.num_instances", f"is {wanted}, but {alloc} "
                                       f"with {what} hold {fill} instance(s) ({wanted * need} "
                                       f"GPUs needed, {nodes * per_node} there)",
                                       f"use at most {fill}, or more num_nodes")]
    if layout.nodes_per_instance > 1:
        return Layout(wanted, need, layout.nodes_per_instance, 1), []
    per = max(1, per_node // need)
    return Layout(wanted, need, 1, min(per, wanted)), []
