"""Sweeps: a run file's ``models:`` list turns one run into one configuration per model.

Entries, each becoming one element of ONE Slurm array job (one server per model, shared by all
of that model's tasks)::

    models:
      - /lustre/models/llama-3.1-8b           # a checkpoint directory; name = its basename
      - glob: /lustre/ckpts/run7/step_*       # every matching directory, in sorted order
      - name: qwen-7b                         # explicit name and any deployment/target keys
        hf_model_handle: Qwen/Qwen2.5-7B-Instruct
        deployment: {tensor_parallel_size: 2}
      - {name: hosted, url: https://api.example.com/v1, model_id: big-model}  # external
"""

from __future__ import annotations

import collections
import copy
import glob
import os
from pathlib import PurePosixPath
from typing import Any

from hpceval.config.errors import ConfigError, ConfigIssue

ENTRY_KEYS = {"name", "checkpoint_path", "hf_model_handle", "url", "model_id", "glob",
              "deployment", "target"}


def _patch(entry: dict[str, Any], name: str) -> dict[str, Any]:
    deployment: dict[str, Any] = copy.deepcopy(entry.get("deployment") or {})
    target: dict[str, Any] = copy.deepcopy(entry.get("target") or {})
    endpoint = target.setdefault("api_endpoint", {})
    for key in ("checkpoint_path", "hf_model_handle"):
        if key in entry:
            deployment[key] = entry[key]
            deployment.setdefault("hf_model_handle" if key == "checkpoint_path"
                                  else "checkpoint_path", None)
    if "url" in entry:
        endpoint["url"] = entry["url"]
    endpoint.setdefault("model_id", entry.get("model_id", name))
    deployment.setdefault("served_model_name", name)
    return {"deployment": deployment, "target": target}


def expand_models(models: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(label for errors, model name, patch to merge over the run) for every model."""
    if not isinstance(models, list) or not models:
        raise ConfigError.at("models", "must be a non-empty list",
                             "list checkpoint paths or {name: ..., checkpoint_path: ...} entries")
    out: list[tuple[str, str, dict[str, Any]]] = []
    issues: list[ConfigIssue] = []
    for i, entry in enumerate(models):
        where = f"models[{i}]"
        if isinstance(entry, str):
            entry = {"glob": entry} if any(c in entry for c in "*?[") else {
                "checkpoint_path": entry}
        if not isinstance(entry, dict):
            issues.append(ConfigIssue(where, "must be a path or a mapping",
                                      "write - /path/to/model or - {name: x, checkpoint_path: y}"))
            continue
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            issues.append(ConfigIssue(f"{where}.{unknown[0]}", "unknown key",
                                      "use " + ", ".join(sorted(ENTRY_KEYS))))
            continue
        if "glob" in entry:
            pattern = os.path.expanduser(os.path.expandvars(str(entry["glob"])))
            matches = sorted(p for p in glob.glob(pattern) if os.path.isdir(p))
            if not matches:
                issues.append(ConfigIssue(f"{where}.glob", f"{pattern!r} matches no directory",
                                          "check the pattern (it is expanded on this node)"))
            for path in matches:
                item = {k: v for k, v in entry.items() if k not in ("glob", "name")}
                item["checkpoint_path"] = path
                name = PurePosixPath(path).name
                out.append((f"{where} ({path})", name, _patch(item, name)))
            continue
        source = entry.get("checkpoint_path") or entry.get("hf_model_handle") or entry.get(
            "model_id")
        name = str(entry.get("name") or (PurePosixPath(str(source)).name if source else ""))
        if not name:
            issues.append(ConfigIssue(f"{where}.name", "no name and nothing to derive it from",
                                      "give name:, checkpoint_path: or model_id:"))
            continue
        out.append((where, name, _patch(entry, name)))
    counts = collections.Counter(name for _, name, _ in out)  # names.count per name: O(n^2)
    for name in sorted(n for n, seen in counts.items() if seen > 1):
        issues.append(ConfigIssue("models", f"the name {name!r} is used more than once",
                                  "give each model its own name:"))
    if issues:
        raise ConfigError(issues)
    return out
