"""What a watch was started with (watch.json), and the rules every tick applies the same way.

watch.json is written once, by `watch start`, and read by every tick on the compute node; it
is the contract between the two sides, so every field is checked when it is read back.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config.errors import ConfigError
from hpceval.contract import WATCH_FILE
from hpceval.errors import HpcevalError
from hpceval.storage import atomic_write_json, read_json_object

WATCH_SCHEMA = 1
MIN_INTERVAL_ENV = "HPCEVAL_WATCH_MIN_INTERVAL"  # seconds; a site (or a test) may lower it
DEFAULT_MIN_INTERVAL_S = 60  # a tick is a scheduler job: no site wants one every few seconds
DEFAULT_GRACE_S = 300
DEFAULT_ATTEMPTS = 3  # submissions of one checkpoint before it is given up
# submissions per tick: a flood of new folders (planted, or a mistaken pattern) costs at most
# this many jobs an interval; the rest wait, complete, for the next tick
DEFAULT_MAX_PER_TICK = 4
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INTERVAL = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_LAST_INT = re.compile(r"(\d+)(?!.*\d)")
_JOB_ID = re.compile(r"^\d+(_\d+)?$")


class WatchError(HpcevalError):
    """A watch directory that cannot be used as it is (unreadable, damaged, not a watch)."""


@dataclass(frozen=True)
class WatchSpec:
    watch_id: str
    kind: str  # execution.type of the run: the backend that runs the ticks
    run_file: str  # absolute path, read again at every tick
    overrides: tuple[str, ...]
    profile: str | None
    checkpoints: str  # absolute path of the folder the training job writes into
    pattern: str = "step_*"  # fnmatch of a checkpoint's directory name
    step_regex: str | None = None  # one group: the step; default the name's last integer
    marker: str | None = None  # complete when this file exists inside the checkpoint
    grace_s: int | None = DEFAULT_GRACE_S  # else: complete once unchanged this long
    interval_s: int = 600
    after_job: str | None = None  # the training job: the watch ends once it ended
    attempts: int = DEFAULT_ATTEMPTS
    max_per_tick: int = DEFAULT_MAX_PER_TICK
    trust_uids: tuple[int, ...] = ()  # owners besides the user whose checkpoints count
    python: str = ""  # runs the tick on the node
    output_dir: str = ""
    created_at: float = 0.0
    user: str = ""

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["overrides"] = list(self.overrides)
        data["trust_uids"] = list(self.trust_uids)
        return {"schema": WATCH_SCHEMA, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WatchSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["overrides"] = tuple(str(o) for o in values.get("overrides") or ())
        values["trust_uids"] = tuple(int(u) for u in values.get("trust_uids") or ())
        spec = cls(**values)
        if not spec.marker and not spec.grace_s:
            raise ValueError("neither marker nor grace_s is set")
        if not isinstance(spec.max_per_tick, int) or spec.max_per_tick < 1:
            raise ValueError(f"max_per_tick {spec.max_per_tick!r} is not a positive integer")
        return spec

    def step_of(self, name: str) -> int | None:
        return step_of(name, self.step_regex)


def step_of(name: str, regex: str | None = None) -> int | None:
    """The training step in a checkpoint's directory name: the last integer (step_1000 ->
    1000), or the one group of `regex` (searched anywhere in the name); None: not a step."""
    if regex is None:
        found = _LAST_INT.search(name)
        return int(found.group(1)) if found else None
    match = re.search(regex, name)
    if match is None or match.lastindex is None:
        return None
    try:
        return int(match.group(1))
    except (TypeError, ValueError):
        return None


def check_step_regex(regex: str) -> str:
    """The --step-regex itself: valid, exactly one group (ConfigError naming the option)."""
    try:
        compiled = re.compile(regex)
    except re.error as exc:
        raise ConfigError.at("--step-regex", f"{regex!r} is not a regular expression ({exc})",
                             r"e.g. --step-regex 'iter_(\d+)'") from exc
    if compiled.groups != 1:
        raise ConfigError.at("--step-regex", f"{regex!r} has {compiled.groups} groups; the "
                             "step is its one group", r"e.g. --step-regex 'iter_(\d+)'")
    return regex


def min_interval_s() -> int:
    raw = os.environ.get(MIN_INTERVAL_ENV, "")
    return int(raw) if raw.isdigit() else DEFAULT_MIN_INTERVAL_S


def parse_interval(text: str, option: str = "--interval") -> int:
    """'10m', '90s', '1h', '600' -> seconds; below the site minimum is a ConfigError."""
    match = _INTERVAL.match(text)
    if match is None:
        raise ConfigError.at(option, f"{text!r} is not a duration", "e.g. 10m, 90s, 1h or 600")
    seconds = int(match.group(1)) * _UNITS[match.group(2) or "s"]
    floor = min_interval_s()
    if option == "--interval" and seconds < floor:
        raise ConfigError.at(option, f"{text} is below the minimum of {floor} s (each tick is "
                             "a scheduler job)", f"use at least {floor}s; a site may lower "
                             f"the minimum with ${MIN_INTERVAL_ENV}")
    return seconds


def check_job_id(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise ConfigError.at("--after-job", f"{job_id!r} is not a job id (a number, or "
                             "number_number for an array element)",
                             "give the training job's numeric id, as the scheduler's list of "
                             "your jobs shows it")
    return job_id


def check_marker(marker: str) -> str:
    parts = Path(marker).parts
    if not parts or Path(marker).is_absolute() or ".." in parts:
        raise ConfigError.at("--marker", f"{marker!r} is not a file name inside a checkpoint",
                             "e.g. --marker COMPLETE (a file the training job writes last)")
    return marker


def write_spec(watch_dir: Path, spec: WatchSpec) -> None:
    atomic_write_json(watch_dir / WATCH_FILE, spec.to_json())


def read_spec(watch_dir: Path) -> WatchSpec:
    path = watch_dir / WATCH_FILE
    data = read_json_object(path)
    if data is None:
        raise WatchError(f"{path} is missing or not a JSON object: not a watch directory")
    if data.get("schema") != WATCH_SCHEMA:
        raise WatchError(f"{path} has schema {data.get('schema')!r}; this hpceval reads "
                         f"{WATCH_SCHEMA}")
    try:
        return WatchSpec.from_json(data)
    except (TypeError, ValueError) as exc:
        raise WatchError(f"{path} is damaged: {exc}") from exc
