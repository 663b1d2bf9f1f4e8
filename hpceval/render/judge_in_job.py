"""Auxiliary deployments (a judge) in the job script: their proxies, the variables the tasks
see, and references in task environments. The reference syntax and the variable names are
config/auxiliary.py's; the judge's servers are rendered as the model's are (deployments.py).

Every auxiliary deployment gets its own in-job proxy, whatever serves it: the response cache in
models/<m>/auxiliary/<name>/cache is what lets a resumed job replay the judge's answers instead
of asking it again.
"""

from __future__ import annotations

import shlex
from typing import Any

from hpceval.config import ResolvedConfig, auxiliary
from hpceval.config.endpoint_key import judge_client_key
from hpceval.config.schema import AuxiliaryDeploymentSpec
from hpceval.config.secret_files import from_file
from hpceval.contract import SERVER_DIR, aux_folder
from hpceval.engines import engine_for
from hpceval.render.ports import PortPlan
from hpceval.render.quoting import ShellCode, passed_env, var
from hpceval.render.urls import proxied

SERVED_BASE_PATH = "/v1"  # vLLM, SGLang and command servers: the OpenAI routes


def urls_var(key: str) -> str:
    """The shell array holding one deployment's instance URLs (its proxy's upstreams)."""
    return "MODEL_URLS" if key == "model" else f"AUX_{key.upper()}_URLS"


def aux_dir(name: str) -> ShellCode:
    return ShellCode(f'"$MODEL_DIR/{aux_folder(name)}"')  # name: an identifier (checked)


def proxy_views(resolved: ResolvedConfig, ports: PortPlan) -> list[dict[str, Any]]:
    views = []
    for name, aux in resolved.spec.auxiliary_deployments.items():
        upper = name.upper()
        engine = engine_for(aux.type)
        if not engine.serves:
            kind, split = "external", proxied(aux.url)
            base_path = split["base_path"] or ""
            token = aux.api_key_name or ""
            summary = f"an external endpoint, {aux.url}"
        elif aux.scope == "sweep":
            kind, split, base_path = "sweep", {}, SERVED_BASE_PATH
            token = f"HPCEVAL_AUX_{upper}_TOKEN"
            summary = "served by the sweep's own judge job (it loads once for every model)"
        else:
            kind, split, base_path = "served", {}, SERVED_BASE_PATH
            token = "HPCEVAL_JOB_TOKEN" if engine.token_env else ""
            summary = f"served in this job ({aux.type}), logs in {aux_folder(name)}/{SERVER_DIR}"
        views.append({
            "name": name, "kind": kind, "summary": summary, "dir": aux_dir(name),
            "urls_var": urls_var(name), "origin": split.get("origin"),
            "proxy_slot": ports.proxy_slot(name), "token_name": token,
            # the key its proxy asks clients for (the tasks get it as <PREFIX>_API_KEY)
            "client_key": judge_client_key(aux),
            "token_var": f"HPCEVAL_AUX_{upper}_TOKEN", "timeout": aux.health_timeout,
            "exports": _exports(name, aux, base_path),
            # fails the job at once, naming it, if the key is not set (resume finds it too);
            # none for a key the job reads from a file itself (execution.env_vars file:)
            "key_check": passed_env(aux.api_key_name) if aux.api_key_name and
            not from_file(resolved.spec, aux.api_key_name) else None,
        })
    return views


def _exports(name: str, aux: AuxiliaryDeploymentSpec, base_path: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for variable, field in auxiliary.exported_variables(name, aux):
        if field == "model_id":
            out.append((variable, auxiliary.model_id(aux) or ""))
        else:
            path = base_path + auxiliary.URL_FIELDS[field]
            out.append((variable, ShellCode(f'"$AUX_BASE"{shlex.quote(path)}' if path
                                            else '"$AUX_BASE"')))
    return out


def exported_names(resolved: ResolvedConfig) -> list[str]:
    """Every variable the job exports for the judges: containers (--cleanenv) get them too."""
    return [variable for name, aux in resolved.spec.auxiliary_deployments.items()
            for variable, _ in auxiliary.exported_variables(name, aux)]


def container_env(resolved: ResolvedConfig) -> list[tuple[str, Any]]:
    return [(n, var(n)) for n in exported_names(resolved)]


def env_value(text: str, resolved: ResolvedConfig) -> ShellCode:
    """A task environment value with references, as one shell word: literal pieces quoted, a
    URL as "${HPCEVAL_AUX_<NAME>_<FIELD>}", the model name as its quoted literal."""
    aux = resolved.spec.auxiliary_deployments
    words = []
    for piece in auxiliary.split(text):
        if isinstance(piece, str):
            words.append(shlex.quote(piece))
        elif piece.field == "model_id":
            words.append(shlex.quote(auxiliary.model_id(aux[piece.name]) or ""))
        else:
            words.append('"${' + piece.variable + '}"')
    return ShellCode("".join(words) or "''")
