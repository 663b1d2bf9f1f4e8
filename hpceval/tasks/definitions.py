"""Plain data types of the task catalogue, and the errors its lookups raise.

Kept free of YAML/Jinja imports: `hpceval ls tasks` builds these from the JSON index alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from hpceval.errors import HpcevalError
from hpceval.runtimes import from_image

EndpointType = Literal["chat", "completions", "vlm", "embedding"]
ENDPOINT_TYPES: tuple[str, ...] = ("chat", "completions", "vlm", "embedding")

# The harness-independent knobs every command template receives as `params.<name>`.
# `extra` is a free-form mapping for harness-specific settings.
GENERIC_PARAMS: tuple[str, ...] = (
    "limit_samples",
    "parallelism",
    "temperature",
    "top_p",
    "max_new_tokens",
    "request_timeout",
    "max_retries",
    "num_fewshot",
    "extra",
)


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class HarnessDef:
    """One evaluation harness: where it runs, how it is invoked, how its results are read."""

    name: str
    description: str
    image: str | None
    sif: str | None
    runtime: str  # hpceval.runtimes.PLACES: from its image, or host-installed
    parser: str
    command: str
    default_endpoint_type: str
    upstream_image: str | None = None
    pip_package: str | None = None
    required_env: tuple[str, ...] = ()
    needs_gpu: bool = False
    needs_judge: bool = False
    qualified_only: bool = False
    aliases: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=_empty, hash=False, compare=False)
    source: str = ""

    @property
    def from_image(self) -> bool:
        """Whether the catalogue runs it from its image (else from host-installed tools)."""
        return from_image(self.runtime)


@dataclass(frozen=True)
class TaskDef:
    """One runnable task. Harness-level settings are already merged in (effective values)."""

    name: str
    harness: str
    task_id: str
    endpoint_type: str
    description: str
    image: str | None
    sif: str | None
    needs_gpu: bool = False
    needs_judge: bool = False
    required_env: tuple[str, ...] = ()
    canonical: bool = False
    aliases: tuple[str, ...] = ()
    unlisted: bool = False
    data: tuple[str, ...] = ()  # "hf-dataset:org/name": read at run time (staged for offline nodes)
    needs_network: str | None = None  # why it cannot run offline, whatever is staged
    samples: int | None = None  # items in its dataset, when the catalogue knows
    # requests the harness sends per item, when fixed (1 for plain generation); None when it
    # varies (log-likelihood tasks send one per answer choice) or is not known
    requests_per_sample: int | None = None
    params: Mapping[str, Any] = field(default_factory=_empty, hash=False, compare=False)
    source: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.harness}.{self.name}"

    def expected_requests(self, limit_samples: int | None) -> int | None:
        """The requests this task sends, or None when that is not known: never a guess, so
        `status` shows no total (and no ETA) rather than a wrong one. Items: limit_samples,
        capped by the dataset size when the catalogue records it; with neither, unknown."""
        items = [n for n in (limit_samples, self.samples) if n is not None]
        if not items or self.requests_per_sample is None:
            return None
        return min(items) * self.requests_per_sample


@dataclass(frozen=True)
class Resolution:
    """The task a user-typed name resolved to, with a one-line note the CLI can print."""

    requested: str
    task: TaskDef
    # How it was found: qualified | name | canonical | alias | case-insensitive | unlisted
    via: str
    also_in: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        tags = {
            "alias": "alias",
            "case-insensitive": "case-insensitive match",
            "unlisted": "not in the catalogue; run as an unlisted task",
        }
        details = [tags[self.via]] if self.via in tags else []
        if self.also_in:
            details.append(f"also in: {', '.join(self.also_in)}")
        text = f"{self.requested} -> {self.task.qualified_name}"
        return f"{text} ({'; '.join(details)})" if details else text


class CatalogueError(HpcevalError, ValueError):
    """A catalogue file is malformed. The message names the file and the key path."""

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        where = f"{source}: {path}" if path else source
        super().__init__(f"{where}: {message}")


class TaskLookupError(HpcevalError, LookupError):
    """Base class of resolution failures; str() is a complete user-facing message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownTaskError(TaskLookupError):
    def __init__(self, name: str, suggestions: tuple[str, ...] = (), hint: str = "") -> None:
        self.name = name
        self.suggestions = suggestions
        message = f"unknown task {name!r}"
        if suggestions:
            message += f"; did you mean: {', '.join(suggestions)}?"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class AmbiguousTaskError(TaskLookupError):
    def __init__(self, name: str, choices: tuple[str, ...]) -> None:
        self.name = name
        self.choices = choices
        super().__init__(
            f"task name {name!r} is in several harnesses; write one of: {', '.join(choices)}"
        )


class UnknownHarnessError(TaskLookupError):
    def __init__(self, name: str, suggestions: tuple[str, ...] = ()) -> None:
        self.name = name
        self.suggestions = suggestions
        message = f"unknown harness {name!r}"
        if suggestions:
            message += f"; did you mean: {', '.join(suggestions)}?"
        super().__init__(message)
