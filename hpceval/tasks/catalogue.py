"""The in-memory catalogue: listing and name resolution.

Resolution order for a user-typed name (first hit wins):

1. ``harness.task`` (harness name or harness alias) - always exact, always allowed.
2. A short task name that exists in exactly one harness.
3. A short name in several harnesses: the task marked ``canonical: true`` in the data; without
   one, AmbiguousTaskError lists the ``harness.task`` choices.
4. An alias from the data (``aegis`` -> ``safety_eval.aegis_v2``).
5. A case-insensitive match, if it is unique (``aime_2025`` -> ``simple_evals.AIME_2025``).

Tasks of ``qualified_only`` harnesses (codec, whose task names shadow the benchmarks they check
for contamination) never answer a short name; they are only mentioned in "also in".
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from hpceval.tasks.definitions import (
    AmbiguousTaskError,
    HarnessDef,
    Resolution,
    TaskDef,
    UnknownHarnessError,
    UnknownTaskError,
)


class Catalogue:
    def __init__(self, harnesses: list[HarnessDef], tasks: list[TaskDef]) -> None:
        self.harnesses: Mapping[str, HarnessDef] = MappingProxyType({h.name: h for h in harnesses})
        self.tasks: tuple[TaskDef, ...] = tuple(
            sorted(tasks, key=lambda t: (t.harness.lower(), t.name.lower(), t.name))
        )
        self._harness_alias = {a: h.name for h in harnesses for a in h.aliases}
        self._by_qualified = {(t.harness, t.name): t for t in tasks}
        self._by_name: dict[str, list[TaskDef]] = {}
        self._alias: dict[str, TaskDef] = {}
        for t in self.tasks:
            self._by_name.setdefault(t.name, []).append(t)
            for alias in t.aliases:
                self._alias[alias] = t

    @classmethod
    def from_index(cls, index: Mapping[str, Any]) -> Catalogue:
        harnesses = [_harness(h) for h in index["harnesses"]]
        tasks = [_task(t) for t in index["tasks"]]
        return cls(harnesses, tasks)

    def harness(self, name: str) -> HarnessDef:
        real = self._harness_alias.get(name, name)
        if real not in self.harnesses:
            choices = list(self.harnesses) + list(self._harness_alias)
            raise UnknownHarnessError(name, tuple(difflib.get_close_matches(name, choices, n=3)))
        return self.harnesses[real]

    def list(self, harness: str | None = None, endpoint_type: str | None = None) -> list[TaskDef]:
        wanted = self.harness(harness).name if harness is not None else None
        return [
            t
            for t in self.tasks
            if (wanted is None or t.harness == wanted)
            and (endpoint_type is None or t.endpoint_type == endpoint_type)
        ]

    def resolve(self, name: str, allow_unlisted: bool = False) -> Resolution:
        name = name.strip()
        harness_part, dot, task_part = name.partition(".")
        if dot and (harness_part in self.harnesses or harness_part in self._harness_alias):
            return self._resolve_qualified(name, harness_part, task_part, allow_unlisted)

        candidates = self._by_name.get(name, [])
        visible = [t for t in candidates if not self.harnesses[t.harness].qualified_only]
        if len(visible) == 1:
            return Resolution(name, visible[0], "name", self._others(candidates, visible[0]))
        if len(visible) > 1:
            canonical = [t for t in visible if t.canonical]
            if len(canonical) == 1:
                return Resolution(
                    name, canonical[0], "canonical", self._others(candidates, canonical[0])
                )
            raise AmbiguousTaskError(name, tuple(t.qualified_name for t in visible))

        if name in self._alias:
            return Resolution(name, self._alias[name], "alias")

        folded = name.casefold()
        matches = {
            t.qualified_name: t
            for key, ts in self._by_name.items()
            if key.casefold() == folded
            for t in ts
            if not self.harnesses[t.harness].qualified_only
        }
        if len(matches) == 1:
            (task,) = matches.values()
            return Resolution(name, task, "case-insensitive", self._others(candidates, task))

        if candidates:  # the name exists, but only in qualified-only harnesses
            owners = ", ".join(sorted({t.harness for t in candidates}))
            raise UnknownTaskError(
                name,
                tuple(t.qualified_name for t in candidates),
                f"tasks of {owners} are only reachable by their harness.task name",
            )
        raise UnknownTaskError(name, self._suggest(name))

    def _resolve_qualified(
        self, name: str, harness_part: str, task_part: str, allow_unlisted: bool
    ) -> Resolution:
        harness = self.harness(harness_part)
        task = self._by_qualified.get((harness.name, task_part))
        if task is not None:
            return Resolution(name, task, "qualified")
        if allow_unlisted and task_part:
            return Resolution(name, _synthesize(harness, task_part), "unlisted")
        in_harness = [t.name for t in self.tasks if t.harness == harness.name]
        close = difflib.get_close_matches(task_part, in_harness, n=5, cutoff=0.6)
        raise UnknownTaskError(
            name,
            tuple(f"{harness.name}.{c}" for c in close),
            "pass allow_unlisted=True (CLI: --allow-unlisted) to run a task the catalogue lacks",
        )

    @staticmethod
    def _others(candidates: builtins.list[TaskDef], chosen: TaskDef) -> tuple[str, ...]:
        return tuple(sorted({t.harness for t in candidates if t is not chosen}))

    def _suggest(self, name: str) -> tuple[str, ...]:
        # Offer both short names and qualified names so a typo in either form finds its match.
        pool: set[str] = set(self._alias)
        for t in self.tasks:
            pool.add(t.qualified_name)
            if not self.harnesses[t.harness].qualified_only:
                pool.add(t.name)
        return tuple(difflib.get_close_matches(name, sorted(pool), n=5, cutoff=0.6))


def _synthesize(harness: HarnessDef, task_name: str) -> TaskDef:
    return TaskDef(
        name=task_name,
        harness=harness.name,
        task_id=task_name,
        endpoint_type=harness.default_endpoint_type,
        description=f"Unlisted {harness.name} task (not in the hpceval catalogue)",
        image=harness.image,
        sif=harness.sif,
        needs_gpu=harness.needs_gpu,
        needs_judge=harness.needs_judge,
        required_env=harness.required_env,
        unlisted=True,
        params=harness.defaults,
    )


D = TypeVar("D", HarnessDef, TaskDef)


def _from_index(cls: type[D], raw: Mapping[str, Any]) -> D:
    """A harness or task definition from its index entry (plain JSON): its lists become the
    tuples and its objects the read-only mappings the frozen definition holds; a key the entry
    lacks (an optional one, e.g. a task's sample count) keeps the field's default."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if str(f.type).startswith("tuple["):
            value = tuple(value)
        elif str(f.type).startswith("Mapping["):
            value = MappingProxyType(value)
        values[f.name] = value
    return cls(**values)


def _harness(h: Mapping[str, Any]) -> HarnessDef:
    return _from_index(HarnessDef, h)


def _task(t: Mapping[str, Any]) -> TaskDef:
    return _from_index(TaskDef, t)
