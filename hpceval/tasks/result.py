"""The unified results schema every harness adapter produces.

One ``TaskResult`` per task run, holding one ``Metric`` per (metric, filter) the harness
reported. Written as ``results.json`` in the task's directory; the JSON is stable (sorted keys)
so that files can be diffed and compared across runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Metric:
    task: str  # harness-native (sub)task the number belongs to, e.g. ifeval or mmlu_anatomy
    name: str  # e.g. exact_match, prompt_level_strict_acc
    value: float
    stderr: float | None = None
    filter: str | None = None  # lm-eval's filter name (strict-match, flexible-extract, ...)
    n_samples: int | None = None


@dataclass(frozen=True)
class TaskResult:
    task: str  # the hpceval task name (as resolved: harness.task)
    harness: str
    harness_version: str | None
    metrics: list[Metric]
    source_file: str | None = None  # the harness's own output file this was parsed from
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        # strict JSON: a bare NaN is not JSON, and readers other than Python's refuse it
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True,
                          allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TaskResult:
        data = json.loads(text)
        metrics = [Metric(**m) for m in data.pop("metrics")]
        return cls(metrics=metrics, **data)

    def finite(self) -> TaskResult:
        """Only the metrics with a finite value (NaN or Infinity is no score: shared-cluster-4
        N8); their keys go to extra["non_finite"], and a non-finite stderr becomes None."""
        kept, dropped = [], []
        for m in self.metrics:
            if not math.isfinite(m.value):
                dropped.append(f"{m.task}/{m.name}{',' + m.filter if m.filter else ''}")
                continue
            stderr = m.stderr if m.stderr is None or math.isfinite(m.stderr) else None
            kept.append(dataclasses.replace(m, stderr=stderr))
        extra = {**self.extra, "non_finite": dropped} if dropped else self.extra
        return dataclasses.replace(self, metrics=kept, extra=extra)

    def value(self, name: str, task: str | None = None, filter: str | None = None) -> float:
        """The one metric matching; raises KeyError naming what exists if none or several."""
        found = [m for m in self.metrics if m.name == name and (task is None or m.task == task)
                 and (filter is None or m.filter == filter)]
        if len(found) != 1:
            have = sorted({(m.task, m.name, m.filter or "") for m in self.metrics})
            raise KeyError(f"{len(found)} metrics match {name!r} (task={task}, filter={filter});"
                           f" have {have}")
        return found[0].value
