"""Compose a run configuration from its layers, remembering where each value came from.

Order (later wins): site profile (with its ``extends`` chain) -> deployment preset -> run file
-> ``-o`` overrides. The profile and preset are picked by the run file's ``defaults:`` list
(``- execution: <profile>``, ``- deployment: <kind>``), by ``--profile``, or by
``$HPCEVAL_PROFILE``.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.overrides import Override, apply_override, find_task, parse_override
from hpceval.config.placeholders import Placeholders
from hpceval.config.profiles import find_file, read_yaml, split_profile
from hpceval.config.translation import TRANSLATION, Translation
from hpceval.runtimes import bind_parts


@dataclass
class Composed:
    data: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)  # key path -> layer it came from
    notes: list[str] = field(default_factory=list)
    run_file: Path | None = None
    layers: list[tuple[str, str]] = field(default_factory=list)  # (label, origin), merge order
    # how another tool's files were read: resolving asks it again for what needs the machine
    translation: Translation = field(default=TRANSLATION, repr=False, compare=False)

    def layer_lines(self) -> list[str]:
        """One line per layer, in merge order (later wins): the profile file and each
        ``extends:`` parent with how it was found, presets, the run file, each -o (what
        `config show` and `submit` print, so a planted or unexpected layer is seen)."""
        return [f"{label}: {origin}" for label, origin in self.layers]

    def source_of(self, path: str) -> str:
        while path:
            if path in self.sources:
                return self.sources[path]
            path = path.rpartition(".")[0]
        return "default"


def _leaves(data: Any, prefix: str) -> list[str]:
    if isinstance(data, dict) and data:
        out: list[str] = []
        for k, v in data.items():
            out += _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [prefix]


def merge(base: dict[str, Any], layer: dict[str, Any], sources: dict[str, str], source: str,
          prefix: str = "") -> None:
    """Deep-merge ``layer`` into ``base``; mappings merge, everything else replaces."""
    for k, v in layer.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v, sources, source, path)
            continue
        base[k] = copy.deepcopy(v)
        for stale in [p for p in sources if p.startswith(path + ".")]:
            del sources[stale]
        for leaf in _leaves(v, path):
            sources[leaf] = source


_AUX_DEFAULT = re.compile(r"^deployment/([A-Za-z0-9_./-]+)@auxiliary_deployments\.(\w+)$")


def _aux_default(entry: str, where: str, translation: Translation) -> tuple[str, str]:
    """``deployment/vllm@auxiliary_deployments.judge``: the judge starts from the vllm preset
    (as ``deployment: vllm`` does for the model); returns (judge name, preset)."""
    m = _AUX_DEFAULT.match(entry.strip())
    if m is None:
        raise ConfigError.at(where, f"{entry!r} is not a preset for an auxiliary deployment",
                             "write deployment/<preset>@auxiliary_deployments.<name>")
    translation.check_defaults_entry("deployment", m.group(1))
    return m.group(2), m.group(1)


def _parse_defaults(defaults: Any, translation: Translation
                    ) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """NeMo-style ``defaults: [{execution: x}, {deployment: y}, _self_]`` or a plain mapping;
    also the presets of auxiliary deployments, as (name, preset)."""
    aux: list[tuple[str, str]] = []
    if defaults is None:
        return {}, aux
    pairs: list[tuple[Any, Any]] = []
    if isinstance(defaults, dict):
        pairs = list(defaults.items())
    else:
        if not isinstance(defaults, list):
            raise ConfigError.at("defaults", "must be a list", "write - execution: <profile>")
        for i, entry in enumerate(defaults):
            if entry == "_self_":
                continue
            if isinstance(entry, str) and "@" in entry:
                aux.append(_aux_default(entry, f"defaults[{i}]", translation))
                continue
            if isinstance(entry, dict) and len(entry) == 1 and "@" in str(next(iter(entry))):
                group, name = next(iter(entry.items()))
                what, _, package = str(group).partition("@")
                aux.append(_aux_default(f"{what}/{name}@{package}", f"defaults[{i}]",
                                        translation))
                continue
            if not isinstance(entry, dict) or len(entry) != 1:
                raise ConfigError.at(f"defaults[{i}]", f"{entry!r} is not 'group: name'",
                                     "write - execution: <profile> or - deployment: <kind>")
            pairs += list(entry.items())
    chosen: dict[str, str] = {}
    for group, name in pairs:
        if group not in ("execution", "deployment"):
            raise ConfigError.at(f"defaults.{group}", "unknown group",
                                 "only execution: <profile> and deployment: <kind> are picked")
        translation.check_defaults_entry(str(group), str(name))
        chosen[str(group)] = str(name)
    return chosen, aux


# How find_file found a profile or preset, for the one line per layer that `config show` and
# `submit` print (review F2: a planted profile must not be chosen without a word).
FOUND = {"HPCEVAL_PROFILE_PATH": "found on $HPCEVAL_PROFILE_PATH",
         "user": "found in your profiles folder", "shipped": "shipped with hpceval",
         "run file": "found next to the run file", "path": "given as a path"}


def _load_profile(name: str, near: Path | None, seen: tuple[str, ...] = (),
                  run_file: Path | None = None) -> list[
        tuple[dict[str, Any], str, str]]:
    """The profile's layers, most general first (``extends`` chains)."""
    if name in seen:
        chain = " -> ".join((*seen, name))
        raise ConfigError.at("extends", f"profiles extend each other in a loop: {chain}",
                             "remove one extends")
    hit = find_file(name, "profile", near, exclude=run_file)
    path, found, raw = hit.path, hit.source, hit.data
    parent = raw.get("extends")
    layers = _load_profile(str(parent), near, (*seen, name), run_file) if parent else []
    body = split_profile(raw)
    body.setdefault("execution", {}).setdefault("profile", name)
    how = f"{FOUND.get(found, found)}; extends: parent of {seen[-1]}" if seen else \
        FOUND.get(found, found)
    return [*layers, (body, f"profile {name}", f"{path} ({how})")]


def _normalize_tasks(layer: dict[str, Any]) -> None:
    """``tasks: [ifeval, gsm8k]`` is shorthand for ``[{name: ifeval}, {name: gsm8k}]``."""
    evaluation = layer.get("evaluation")
    if isinstance(evaluation, dict) and isinstance(evaluation.get("tasks"), list):
        evaluation["tasks"] = [{"name": t} if isinstance(t, str) else t
                               for t in evaluation["tasks"]]


_ONE_DIGIT_HOURS = re.compile(r"^(\d):(\d\d):(\d\d)$")


def _normalize_durations(data: dict[str, Any]) -> None:
    """``1:00:00`` (as NeMo Evaluator users type it) is written ``01:00:00``, Slurm's own form."""
    execution = data.get("execution")
    if not isinstance(execution, dict):
        return
    for key in ("walltime", "max_walltime"):
        value = execution.get(key)
        if isinstance(value, str) and _ONE_DIGIT_HOURS.match(value.strip()):
            execution[key] = "0" + value.strip()


def _merge_launcher_override(out: Composed, ov: Override, translation: Translation) -> bool:
    """A ``-o`` in the launcher's terms, merged with our meaning; False if it needs none."""
    source = f"-o {ov.text}"
    parts = ov.path
    tasks = (out.data.get("evaluation") or {}).get("tasks")
    if parts[:2] == ["evaluation", "tasks"] and len(parts) > 3 and isinstance(tasks, list):
        index, used = find_task(tasks, parts[2:], "evaluation.tasks")
        rest = parts[2 + used:]
        name = str(tasks[index].get("name", index))
        if not rest:
            return False
        task_layer = translation.task_override(name, rest, ov.value, source)
        if task_layer is None:
            return False
        layer, notes = task_layer
        merge(tasks[index], layer, out.sources, source, f"evaluation.tasks.{name}")
        out.notes += notes
        return True
    translated = translation.override(parts, ov.value, source)
    if translated is None:
        return False
    layer, notes = translated
    _normalize_tasks(layer)
    merge(out.data, layer, out.sources, source)
    out.notes += notes
    return True


def _absolute_paths(out: Composed) -> None:
    """A relative output_dir (the launcher's quick start has ./results), cache or bind source
    (./hf_cache) means the folder submit runs in; the run records it absolute, so the job,
    its nodes and later commands agree."""
    execution = out.data.get("execution")
    if not isinstance(execution, dict):
        return
    for key in ("output_dir", "hf_cache_dir"):
        value = execution.get(key)
        if isinstance(value, str) and _relative(value):
            execution[key] = os.path.abspath(value)
            out.notes.append(f"execution.{key} {value!r} is relative: using "
                             f"{execution[key]} (the folder this command runs in)")
    binds = execution.get("extra_binds")
    for i, bind in enumerate(binds if isinstance(binds, list) else []):
        parts = bind_parts(bind) if isinstance(bind, str) else [""]
        src = parts[0]
        if _relative(src):
            binds[i] = ":".join([os.path.abspath(src), *parts[1:]])  # type: ignore[index]
            out.notes.append(f"execution.extra_binds: {src!r} is relative: binding "
                             f"{os.path.abspath(src)}")


INCLUDE_PATH = "include_path"  # params.extra key: the lm-eval task folder (staging checks it)


def _absolute_include_paths(out: Composed) -> None:
    """A relative (or ~) task folder in the run file or -o means the folder submit runs in,
    as for output_dir: lm-eval would look for it in the task's own new folder of the run
    directory, where nothing is, and the submit preflight could not check what it names."""
    evaluation = out.data.get("evaluation")
    if not isinstance(evaluation, dict):
        return
    tasks = evaluation.get("tasks")
    holders = [("evaluation.params", evaluation.get("params"))] + [
        (f"evaluation.tasks.{t.get('name', i)}.params", t.get("params"))
        for i, t in enumerate(tasks if isinstance(tasks, list) else []) if isinstance(t, dict)]
    for where, params in holders:
        extra = params.get("extra") if isinstance(params, dict) else None
        value = extra.get(INCLUDE_PATH) if isinstance(extra, dict) else None
        if isinstance(value, str) and value and not value.startswith(("/", "$")):
            extra[INCLUDE_PATH] = os.path.abspath(os.path.expanduser(value))  # type: ignore[index]
            out.notes.append(f"{where}.extra.{INCLUDE_PATH} {value!r} is relative: using "
                             f"{extra[INCLUDE_PATH]} (the folder this command runs in)")  # type: ignore[index]


def _relative(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and not value.startswith(("/", "~", "$"))


def compose(run_file: Path | None = None, overrides: tuple[str, ...] | list[str] = (), *,
            profile: str | None = None, translation: Translation = TRANSLATION) -> Composed:
    near = run_file.resolve().parent if run_file else None
    run = read_yaml(run_file, "config") if run_file else {}
    run = copy.deepcopy(run)
    chosen, aux_presets = _parse_defaults(run.pop("defaults", None), translation)
    chosen_by = ("--profile" if profile else "the run file's defaults"
                 if "execution" in chosen else "$HPCEVAL_PROFILE")
    if profile:
        chosen["execution"] = profile
    chosen.setdefault("execution", os.environ.get("HPCEVAL_PROFILE", ""))

    out = Composed(data={}, run_file=run_file, translation=translation)
    layers: list[tuple[dict[str, Any], str, str]] = []
    if chosen["execution"]:
        layers += _load_profile(chosen["execution"], near,
                                run_file=run_file.resolve() if run_file else None)
        body, label, origin = layers[-1]  # the chosen one; its parents come before it
        layers[-1] = (body, label, f"{origin.removesuffix(')')}; chosen by {chosen_by})")
    if chosen.get("deployment"):
        hit = find_file(chosen["deployment"], "deployment", near,
                        what=f"deployment preset {chosen['deployment']}")
        layers.append(({"deployment": hit.data}, f"preset {chosen['deployment']}",
                       f"{hit.path} ({FOUND.get(hit.source, hit.source)})"))
    # NeMo Evaluator's deployment/<kind>@auxiliary_deployments.<name>: the judge starts from
    # what `deployment: <kind>` gives the model, the site profile's deployment keys (its
    # image) and the preset, under the run file's keys.
    site: dict[str, Any] = {}
    for layer, _, _ in layers:
        if isinstance(layer.get("deployment"), dict) and "auxiliary_deployments" not in layer:
            merge(site, copy.deepcopy(layer["deployment"]), {}, "")
    for name, kind in aux_presets:
        hit = find_file(kind, "deployment", near, what=f"deployment preset {kind}")
        preset = copy.deepcopy(site)
        merge(preset, hit.data, {}, "")
        label = f"{'profile deployment keys + ' if site else ''}preset {kind}"
        layers.append(({"auxiliary_deployments": {name: preset}},
                       f"{label} (auxiliary_deployments.{name})",
                       f"{hit.path} ({FOUND.get(hit.source, hit.source)})"))
    if run_file is not None:  # listed even with nothing but defaults: (one line per layer)
        layers.append((run, "run file", str(run_file.resolve()) if run_file else ""))
    placeholders = Placeholders(translation.key_path)
    refused: list[ConfigIssue] = []
    for layer, source, origin in layers:
        out.layers.append((source, origin))
        _normalize_tasks(layer)
        placeholders.read_layer(layer, source)  # before translation drops or renames a key
        try:
            out.notes += translation.layer(layer, source)
        except ConfigError as exc:  # reported with every placeholder, not one at a time
            refused += exc.issues
        merge(out.data, layer, out.sources, source)
    for text in overrides:
        out.layers.append(("-o", text))
        ov = parse_override(text)
        dotted = ".".join(ov.path)
        placeholders.set_by_override(dotted, ov.value, ov.delete)
        if dotted in translation.renamed:
            ov = type(ov)(translation.renamed[dotted].split("."), ov.value, ov.delete, ov.text)
        if not ov.delete and _merge_launcher_override(out, ov, translation):
            continue
        path = apply_override(out.data, ov)
        _normalize_tasks(out.data)  # before the next -o addresses a task by its name
        for stale in [p for p in out.sources if p == path or p.startswith(path + ".")]:
            del out.sources[stale]
        if not ov.delete:
            for leaf in _leaves(ov.value, path):
                out.sources[leaf] = f"-o {text}"
    refused += placeholders.issues()
    if refused:
        raise ConfigError(refused)
    out.notes += translation.merged(out.data)
    _absolute_paths(out)
    _absolute_include_paths(out)
    _normalize_durations(out.data)
    return out
