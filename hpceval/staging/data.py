"""Hub data a run names, and whether the shared Hugging Face cache already holds it.

Only what the configuration and the catalogue record is staged: the served model when it is
given as ``deployment.hf_model_handle``, and tokenizers named by a task's
``params.extra.tokenizer``. Harness datasets are not recorded in the catalogue (eval-factory
images resolve them inside the container), so nothing is guessed about them here.

The job sets ``HF_HOME`` to ``execution.hf_cache_dir``; the hub cache is its ``hub`` folder,
laid out as ``models--<org>--<name>/snapshots/<revision>/``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.tasks import Catalogue

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TOKENIZER_FILES = ("tokenizer*", "special_tokens_map.json", "vocab*", "merges.txt", "*.model",
                   "*.tiktoken", "config.json", "generation_config.json", "chat_template*")
# A snapshot counts as present when it holds one of these (config.json: a model's weights come
# with it; the tokenizer files: what a tokenizer-only download fetches).
_PRESENT = {"model": ("config.json",),
            "tokenizer": ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")}

Downloader = Callable[..., Any]


@dataclass(frozen=True)
class DataNeed:
    kind: str  # "model" | "tokenizer"
    repo_id: str
    where: str  # the config key that names it

    @property
    def allow_patterns(self) -> tuple[str, ...] | None:
        return TOKENIZER_FILES if self.kind == "tokenizer" else None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.repo_id}"


def looks_like_repo_id(value: object) -> bool:
    """``org/name`` that is not a path on this machine (tokenizer may also be a local folder)."""
    return (isinstance(value, str) and bool(_REPO_ID.match(value))
            and not value.startswith((".", "/")) and not Path(value).exists())


def task_extras(resolved: ResolvedConfig, catalogue: Catalogue) -> list[tuple[str, dict[str, Any]]]:
    """(config key, effective params.extra) per task: catalogue extra, then the run's, as the
    renderer merges them."""
    from hpceval.tasks import TaskLookupError

    out: list[tuple[str, dict[str, Any]]] = []
    for task_spec in resolved.spec.evaluation.tasks:
        try:
            task = catalogue.resolve(task_spec.name, allow_unlisted=task_spec.allow_unlisted).task
        except TaskLookupError:
            continue
        extra = {**dict(task.params.get("extra", {})), **task_spec.params.extra}
        out.append((f"evaluation.tasks.{task_spec.name}", extra))
    return out


def data_needs(resolved: ResolvedConfig, catalogue: Catalogue) -> list[DataNeed]:
    dep = resolved.spec.deployment
    needs: list[DataNeed] = []
    if dep.type in ("vllm", "sglang") and dep.hf_model_handle:
        needs.append(DataNeed("model", dep.hf_model_handle, "deployment.hf_model_handle"))
    for where, extra in task_extras(resolved, catalogue):
        if looks_like_repo_id(extra.get("tokenizer")):
            needs.append(DataNeed("tokenizer", extra["tokenizer"],
                                  f"{where}.params.extra.tokenizer"))
    unique: dict[str, DataNeed] = {}
    for need in needs:
        unique.setdefault(need.key, need)
    return list(unique.values())


def hub_dir(hf_cache_dir: str) -> Path:
    return Path(hf_cache_dir) / "hub"


def is_cached(need: DataNeed, hf_cache_dir: str) -> bool:
    folder = hub_dir(hf_cache_dir) / ("models--" + need.repo_id.replace("/", "--")) / "snapshots"
    try:
        snapshots = [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return False
    return any((snap / name).exists() for snap in snapshots for name in _PRESENT[need.kind])


def default_downloader() -> Downloader | None:
    """huggingface_hub.snapshot_download when it is installed (it is not a dependency)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    fetch: Downloader = snapshot_download
    return fetch


def fetch(need: DataNeed, hf_cache_dir: str, downloader: Downloader) -> str:
    """Download into the shared hub cache; returns the snapshot folder. A gated repo reads the
    token from $HF_TOKEN the way huggingface_hub always does: it is never passed or shown."""
    folder = downloader(repo_id=need.repo_id, cache_dir=str(hub_dir(hf_cache_dir)),
                        allow_patterns=list(need.allow_patterns) if need.allow_patterns else None)
    return str(folder)


def manual_command(need: DataNeed, hf_cache_dir: str) -> str:
    """What to run where huggingface_hub is missing (pip install huggingface_hub gives `hf`)."""
    argv = ["hf", "download", need.repo_id, "--cache-dir", str(hub_dir(hf_cache_dir))]
    for pattern in need.allow_patterns or ():
        argv += ["--include", pattern]
    return " ".join(shlex.quote(a) for a in argv)


def token_hint() -> str:
    return "" if os.environ.get("HF_TOKEN") else " (gated repos need $HF_TOKEN set)"
