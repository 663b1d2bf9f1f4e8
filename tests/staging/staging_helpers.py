"""Helpers for the staging tests (imported by name: this folder has no __init__.py): the fake
container tools' registry and call log, run files for an Apptainer site, fake SIF files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpceval.config import ResolvedConfig, load_run

FAKES = Path(__file__).resolve().parents[1] / "fakes"
DATA = Path(__file__).resolve().parent / "data"
SIMPLE_EVALS = "nvcr.io/nvidia/eval-factory/simple-evals:26.03"
LM_EVAL = "nvcr.io/nvidia/eval-factory/lm-evaluation-harness:26.03"
FDF_PATH = "/usr/local/lib/python3.12/dist-packages/core_evals/simple_evals/framework.yml"
INHOUSE_FDF_PATH = "/opt/venv/lib/python3.11/site-packages/core_evals/inhouse_qa/framework.yml"
MAGIC = "hpceval-fake-sif/1"  # tests/fakes/apptainer's SIF format


def digest(n: int) -> str:
    return "sha256:" + f"{n:x}" * 64


@dataclass
class Fakes:
    """The fake container tools of one test: their PATH folder, registry and call log."""

    bin: Path
    registry_file: Path
    log_file: Path

    def add_image(self, ref: str, digest_: str, files: dict[str, str] | None = None) -> None:
        data = json.loads(self.registry_file.read_text())
        data["images"][ref] = {"digest": digest_, "files": files or {}, "labels": {}}
        self.registry_file.write_text(json.dumps(data))

    def enable(self, *tools: str) -> None:
        for tool in tools:
            target = FAKES / ("apptainer" if tool == "singularity" else tool)
            (self.bin / tool).symlink_to(target)

    def calls(self, prog: str | None = None) -> list[list[str]]:
        if not self.log_file.exists():
            return []
        rows = [json.loads(line) for line in self.log_file.read_text().splitlines()]
        return [r["argv"] for r in rows if prog is None or r["prog"] == prog]

    def progs(self, about: str = "") -> list[str]:
        """The fake tools called, in order; with ``about``, those with it in an argument."""
        if not self.log_file.exists():
            return []
        rows = [json.loads(line) for line in self.log_file.read_text().splitlines()]
        return [r["prog"] for r in rows if any(about in word for word in r["argv"])]

    def pulls(self) -> list[list[str]]:
        return [argv for argv in self.calls("apptainer") + self.calls("singularity")
                if argv[0] == "pull"]


@dataclass
class Site:
    root: Path

    @property
    def image_dir(self) -> Path:
        return self.root / "sif"

    @property
    def hf_cache(self) -> Path:
        return self.root / "hf"

    def run_file(self, tasks: list[Any] | None = None, *, name: str = "run.yaml",
                 **sections: dict[str, Any]) -> Path:
        """An Apptainer site (profile `slurm`), external endpoint unless deployment is given."""
        run: dict[str, Any] = {
            "defaults": [{"execution": "slurm"}],
            "execution": {"output_dir": str(self.root / "runs"), "image_dir": str(self.image_dir),
                          "hf_cache_dir": str(self.hf_cache), "offline": True},
            "deployment": {"type": "none"},
            "target": {"api_endpoint": {"url": "http://endpoint.example:8000/v1",
                                        "model_id": "m"}},
            "evaluation": {"tasks": tasks or [{"name": "simple_evals.gpqa_diamond"},
                                              {"name": "simple_evals.mmlu_pro"},
                                              {"name": "lm-evaluation-harness.ifeval"}]},
        }
        for section, values in sections.items():
            run.setdefault(section, {}).update(values)
        path = self.root / name
        path.write_text(yaml.safe_dump(run, sort_keys=False))
        return path

    def load(self, path: Path, overrides: tuple[str, ...] = ()) -> list[ResolvedConfig]:
        return load_run(path, overrides, check_environment=False)


def fake_sif(path: Path, files: dict[str, str], reference: str | None = None) -> Path:
    """A SIF as the fake apptainer writes it (tests that skip the pull use this)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"magic": MAGIC, "name": reference, "digest": digest(9),
                                "files": files, "labels": {}}))
    if reference is not None:
        (path.parent / (path.name + ".json")).write_text(json.dumps({"reference": reference}))
    return path
