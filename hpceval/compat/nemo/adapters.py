"""NeMo Evaluator's ``adapter_config`` (old flat flags or an ``interceptors:`` list) read as
``evaluation.interceptors``.

The launcher merges the run-wide ``adapter_config`` under each task's and starts one adapter per
task. hpceval's in-job proxy serves every task of a job: when every task's merged settings are
the same they become ``evaluation.interceptors``; when they differ, each task's become its own
``evaluation.tasks[].interceptors``, which the proxy applies to that task's requests only (the
task asks under its own route). Settings that only cache, log or count need nothing: the proxy
caches every request and writes progress itself.
"""

from __future__ import annotations

import copy
from typing import Any

from hpceval.errors import ConfigIssue

_REASONING_FLAGS = ("process_reasoning_traces", "use_reasoning")
# Flags whose work the in-job proxy does anyway, or that change nothing the model sees.
_ONLY_BOOKKEEPING = {
    "use_caching", "caching_dir", "reuse_cached_responses", "save_requests", "save_responses",
    "max_saved_requests", "max_saved_responses", "tracking_requests_stats",
    "log_failed_requests", "use_response_logging", "max_logged_responses",
    "use_progress_tracking", "progress_tracking_url", "progress_tracking_interval",
    "generate_html_report", "html_report_size", "include_json", "endpoint_type",
}
_BOOKKEEPING_INTERCEPTORS = {"caching", "endpoint", "response_stats", "progress_tracking",
                             "raise_client_errors", "response_logging"}
_DEFAULT_LOGGED = 10  # the launcher's legacy flags log this many when no maximum is given


def merge_settings(base: Any, over: Any) -> Any:
    """OmegaConf's merge, as the launcher merges run-wide and task settings: mappings deep,
    everything else (lists included) replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge_settings(base.get(k), v)
        return out
    return copy.deepcopy(over)


def _params(config: dict[str, Any], rules: dict[str, Any], where: str,
            issues: list[ConfigIssue]) -> None:
    add = config.get("params_to_add")
    if isinstance(add, dict) and add:
        for name in add:
            if "." in str(name):  # the launcher sets the top-level field; ours would nest
                issues.append(ConfigIssue(f"{where}.params_to_add.{name}", "has a dot, which "
                                          "hpceval reads as a nested field", "nest it instead"))
        rules["add_params"] = {**rules.get("add_params", {}), **add}
    remove = config.get("params_to_remove")
    if isinstance(remove, list) and remove:
        rules["remove_params"] = [*rules.get("remove_params", []), *map(str, remove)]
    rename = config.get("params_to_rename")
    if isinstance(rename, dict) and rename:
        rules["rename_params"] = {**rules.get("rename_params", {}),
                                  **{str(k): str(v) for k, v in rename.items()}}


def _reasoning(config: dict[str, Any], rules: dict[str, Any]) -> None:
    rules["strip_reasoning"] = True
    for theirs, ours in (("start_reasoning_token", "reasoning_start"),
                         ("end_reasoning_token", "reasoning_end")):
        if isinstance(config.get(theirs), str):
            rules[ours] = config[theirs]


def _legacy(adapter: dict[str, Any], rules: dict[str, Any], where: str, notes: list[str],
            issues: list[ConfigIssue]) -> None:
    if any(adapter.get(flag) is True for flag in _REASONING_FLAGS):
        _reasoning(adapter, rules)
    if adapter.get("use_system_prompt") is True:
        if isinstance(adapter.get("custom_system_prompt"), str):
            rules["system_prompt"] = adapter["custom_system_prompt"]
        else:
            issues.append(ConfigIssue(f"{where}.custom_system_prompt", "use_system_prompt is "
                                      "true but there is no prompt", "give the prompt text"))
    _params(adapter, rules, where, issues)
    if adapter.get("use_request_logging") is True:
        logged = [adapter.get("max_logged_requests"), adapter.get("max_logged_responses")]
        rules["log_requests"] = max([n for n in logged if isinstance(n, int)] or
                                    [_DEFAULT_LOGGED])
    known = {*_REASONING_FLAGS, "use_system_prompt", "custom_system_prompt", "params_to_add",
             "params_to_remove", "params_to_rename", "use_request_logging",
             "max_logged_requests", "start_reasoning_token", "end_reasoning_token",
             "interceptors", *_ONLY_BOOKKEEPING}
    unknown = sorted(str(k) for k in adapter if k not in known)
    if unknown:
        notes.append(f"{where}: {', '.join(unknown)} ignored (no counterpart in hpceval)")


def _listed(items: list[Any], rules: dict[str, Any], where: str,
            issues: list[ConfigIssue]) -> None:
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(item, dict) and item.get("enabled") is False:
            continue
        config = item.get("config") if isinstance(item, dict) else None
        config = config if isinstance(config, dict) else {}
        if name == "system_message" and isinstance(config.get("system_message"), str):
            rules["system_prompt"] = config["system_message"]
        elif name == "reasoning":
            _reasoning(config, rules)
        elif name == "payload_modifier":
            _params(config, rules, f"{where}.interceptors[{i}].config", issues)
        elif name == "request_logging":
            limit = config.get("max_requests")
            rules["log_requests"] = limit if isinstance(limit, int) else _DEFAULT_LOGGED
        elif name not in _BOOKKEEPING_INTERCEPTORS:
            issues.append(ConfigIssue(f"{where}.interceptors[{i}]", f"interceptor {name!r} has "
                                      "no counterpart in hpceval", "remove it, or keep this run "
                                      "on NeMo Evaluator"))


def to_interceptors(adapter: Any, where: str, notes: list[str],
                    issues: list[ConfigIssue]) -> dict[str, Any]:
    """One adapter_config as evaluation.interceptors keys (empty: nothing to change)."""
    rules: dict[str, Any] = {}
    if not isinstance(adapter, dict):
        if adapter is not None:
            issues.append(ConfigIssue(where, "must be a mapping", "write key: value pairs"))
        return rules
    _legacy(adapter, rules, where, notes, issues)
    if isinstance(adapter.get("interceptors"), list):
        _listed(adapter["interceptors"], rules, where, issues)
    return rules


def apply(evaluation: dict[str, Any], shared: Any, per_task: dict[str, Any], source: str,
          notes: list[str], issues: list[ConfigIssue]) -> None:
    """Set ``evaluation.interceptors`` from the run-wide and per-task adapter_configs of one
    layer; where tasks' merged settings differ, each task's ``interceptors``."""
    where = "evaluation.nemo_evaluator_config.target.api_endpoint.adapter_config"
    tasks = [t.get("name") for t in evaluation.get("tasks") or [] if isinstance(t, dict)]
    if per_task:
        merged = {str(name): merge_settings(shared or {}, per_task.get(str(name)) or {})
                  for name in tasks}
        found = {name: to_interceptors(raw, f"evaluation.tasks.{name}.nemo_evaluator_config."
                                       "target.api_endpoint.adapter_config", notes, issues)
                 for name, raw in merged.items()}
    else:
        found = {"": to_interceptors(shared, where, notes, issues)}
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for name, r in found.items():
        groups.setdefault(repr(sorted(r.items())), (r, []))[1].append(name)
    if len(groups) > 1:
        for task in evaluation.get("tasks") or []:
            rules = found.get(str(task.get("name"))) if isinstance(task, dict) else None
            if rules:
                _set_keys(task, rules)
        differ = "; ".join(f"{_names(names)}: {_summary(r)}" for r, names in groups.values())
        notes.append(f"{source}: the tasks' adapter_configs became their own interceptors "
                     f"(evaluation.tasks[].interceptors; {differ}): the in-job proxy applies "
                     "each task's to its requests only, as NeMo Evaluator's one adapter per task")
        return
    rules = next(iter(found.values()), {})
    if rules:
        _set_keys(evaluation, rules)
        notes.append(f"{source}: adapter_config became evaluation.interceptors: {_summary(rules)}")
    else:
        notes.append(f"{source}: adapter_config only caches, logs or counts requests, which "
                     "hpceval's in-job proxy does itself")


def _set_keys(node: dict[str, Any], rules: dict[str, Any]) -> None:
    """``rules`` under node's ``interceptors``; keys the file sets there itself win."""
    mine = node.setdefault("interceptors", {})
    if isinstance(mine, dict):
        for k, v in rules.items():
            mine.setdefault(k, v)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return f"{shown} and {len(names) - 3} more" if len(names) > 3 else shown


def _summary(rules: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return ", ".join(f"{k}={short(v)}" for k, v in sorted(rules.items())) or "none"
