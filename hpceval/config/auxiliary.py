"""References to auxiliary deployments (a judge), resolved in ONE place for params and env.

NeMo Evaluator's form: the strings ``auxiliary_deployments.<name>.model_id`` and
``auxiliary_deployments.<name>.<endpoint>_url`` (chat_url, completions_url, embedding_url,
ranking_url) anywhere in a task's params or environment stand for the judge's model name and
URLs; hpceval adds ``.url``, the base URL ending in /v1. Like the launcher, a reference may sit
inside a longer string (it replaces substrings).

The model name is known when the run loads: it is written as a literal. The URLs are only known
inside the job (the judge's proxy listens on a port of the job's block, on the node the job
runs on): a reference becomes the job-script variable ``HPCEVAL_AUX_<NAME>_<FIELD>``, which the
job exports before any task starts, together with NeMo Evaluator's names
``<PREFIX>_<ENDPOINT>_URL`` and ``<PREFIX>_MODEL_ID`` (PREFIX: env_prefix, default the name in
capitals) for harnesses that read those.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import AuxiliaryDeploymentSpec, RunSpec, TaskSpec

if TYPE_CHECKING:
    from hpceval.tasks import TaskDef

REFERENCE = re.compile(r"auxiliary_deployments\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# URL fields -> the path after the base URL (http://<proxy>/v1 for a judge served by vLLM,
# SGLang or a command; an external judge's own base). `url` is the OpenAI base URL itself.
URL_FIELDS = {"url": "", "chat_url": "/chat/completions", "completions_url": "/completions",
              "embedding_url": "/embeddings", "ranking_url": "/ranking"}
FIELDS = (*URL_FIELDS, "model_id")
# What a judged task reads to find its judge (the shipped judged_qa's utils.py, which runs in
# lm-eval's Python without hpceval, reads the same name); an auxiliary deployment named judge
# exports it.
JUDGE_URL_VARIABLE = "JUDGE_CHAT_URL"
# NeMo Evaluator reserves these prefixes for its own variables; HPCEVAL is ours.
RESERVED_PREFIXES = {"SLURM", "PRIMARY", "MODEL", "SERVER", "HPCEVAL"}


@dataclass(frozen=True)
class Reference:
    name: str  # the auxiliary deployment
    field: str  # one of FIELDS

    @property
    def variable(self) -> str:
        """The job-script variable a URL reference stands for."""
        return job_variable(self.name, self.field)


def job_variable(name: str, field: str) -> str:
    return f"HPCEVAL_AUX_{name.upper()}_{field.upper()}"


def env_prefix(name: str, aux: AuxiliaryDeploymentSpec) -> str:
    return aux.env_prefix or name.upper()


def model_id(aux: AuxiliaryDeploymentSpec) -> str | None:
    return aux.request_model


def exported_variables(name: str, aux: AuxiliaryDeploymentSpec) -> list[tuple[str, str]]:
    """(variable, field) the job exports for this deployment: ours, then NeMo Evaluator's
    (<PREFIX>_<ENDPOINT>_URL, <PREFIX>_MODEL_ID; it has no base-URL variable)."""
    prefix = env_prefix(name, aux)
    ours = [(job_variable(name, f), f) for f in FIELDS]
    nel = [(f"{prefix}_{f[:-4].upper()}_URL", f) for f in URL_FIELDS if f != "url"]
    return [*ours, *nel, (f"{prefix}_MODEL_ID", "model_id")]


def split(text: str) -> list[str | Reference]:
    """``text`` as literal pieces and references, in order."""
    out: list[str | Reference] = []
    pos = 0
    for m in REFERENCE.finditer(text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        out.append(Reference(m.group(1), m.group(2)))
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def has_reference(value: Any) -> bool:
    return isinstance(value, str) and REFERENCE.search(value) is not None


def check_reference(ref: Reference, where: str,
                    aux: Mapping[str, AuxiliaryDeploymentSpec]) -> ConfigIssue | None:
    text = f"auxiliary_deployments.{ref.name}.{ref.field}"
    if not aux:
        return ConfigIssue(where, f"refers to {text}, but the run has no auxiliary_deployments",
                           f"add auxiliary_deployments.{ref.name} (see docs/judge.md), or "
                           "write the value itself")
    if ref.name not in aux:
        return ConfigIssue(where, f"refers to {text}: no auxiliary deployment {ref.name!r}",
                           "use one of: " + ", ".join(sorted(aux)))
    if ref.field not in FIELDS:
        return ConfigIssue(where, f"refers to {text}: {ref.field!r} is not a field of an "
                           "auxiliary deployment", "use one of: " + ", ".join(FIELDS))
    if ref.field == "model_id" and not model_id(aux[ref.name]):
        return ConfigIssue(where, f"refers to {text}, but auxiliary_deployments.{ref.name} "
                           "has no model name", f"set auxiliary_deployments.{ref.name}."
                           "served_model_name (or model_id)")
    return None


def resolve(value: Any, aux: Mapping[str, AuxiliaryDeploymentSpec],
            url_token: Any) -> Any:
    """``value`` (nested params) with references replaced: model_id by the literal, URL fields by
    ``url_token(variable)`` (a placeholder the command renderer turns into "${VAR}")."""
    if isinstance(value, dict):
        return {k: resolve(v, aux, url_token) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, aux, url_token) for v in value]
    if not has_reference(value):
        return value
    pieces = []
    for piece in split(value):
        if isinstance(piece, str):
            pieces.append(piece)
        elif piece.name not in aux or piece.field not in FIELDS:
            pieces.append(f"auxiliary_deployments.{piece.name}.{piece.field}")  # refused
        elif piece.field == "model_id":
            pieces.append(model_id(aux[piece.name]) or "")
        else:
            pieces.append(url_token(piece.variable))
    return "".join(pieces)


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")


def reference_issues(spec: RunSpec) -> list[ConfigIssue]:
    """Every reference in task params (all of them, nested) and task/evaluation env_vars that
    names no auxiliary deployment or no field of one."""
    aux = spec.auxiliary_deployments
    places: list[tuple[str, Any]] = [("evaluation.env_vars", spec.evaluation.env_vars),
                                     ("evaluation.params", vars(spec.evaluation.params))]
    shared = vars(spec.evaluation.params)
    for task in spec.evaluation.tasks:
        where = f"evaluation.tasks.{task.name}"
        # a task's params hold evaluation.params too: only what the task changes is its own
        own = {k: v for k, v in vars(task.params).items() if k != "extra" and v != shared[k]}
        own["extra"] = {k: v for k, v in task.params.extra.items()
                        if shared["extra"].get(k) != v}
        places += [(f"{where}.params", own), (f"{where}.env_vars", task.env_vars)]
    issues: list[ConfigIssue] = []
    for base, value in places:
        for where, text in _strings(value, base):
            for piece in split(text):
                if isinstance(piece, Reference):
                    issue = check_reference(piece, where, aux)
                    if issue is not None:
                        issues.append(issue)
    return list(dict.fromkeys(issues))


def judge_issue(task: TaskDef, task_spec: TaskSpec, params: dict[str, Any], spec: RunSpec,
                where: str) -> ConfigIssue | None:
    """A task that asks a judge model (catalogue: needs_judge) and is not one of the external
    judge APIs reached by key (required_env JUDGE_API_KEY) must be told where its judge is: in
    params.extra.judge.url (NeMo Evaluator's spelling), in JUDGE_CHAT_URL in its environment, or
    by an auxiliary deployment that exports JUDGE_CHAT_URL. Refused at load, not in the job."""
    if not task.needs_judge or "JUDGE_API_KEY" in task.required_env:
        return None
    judge = params["extra"].get("judge")
    if isinstance(judge, dict) and judge.get("url"):
        return None
    if JUDGE_URL_VARIABLE in {**spec.evaluation.env_vars, **task_spec.env_vars}:
        return None
    if any(variable == JUDGE_URL_VARIABLE for name, aux in spec.auxiliary_deployments.items()
           for variable, _ in exported_variables(name, aux)):
        return None
    return ConfigIssue(
        f"{where}.params.extra.judge.url",
        f"{task.qualified_name} asks a judge model, and the run names none",
        "serve one in the job (auxiliary_deployments.judge: a deployment, docs/judged-task.md) and "
        "set params.extra.judge.url: auxiliary_deployments.judge.chat_url and "
        ".model_id: auxiliary_deployments.judge.model_id; or give an external judge's URL")
