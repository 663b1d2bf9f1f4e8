"""The local run index (~/.cache/hpceval/runs.json): makes `ls runs` and RUN look-ups fast.

The shared registries (one per output directory) are the truth; the index is a per-user copy
that is rebuilt for an output directory whenever that registry's size or mtime changed, so a
look-up costs one stat() per known output directory, not a scan of run directories on a
parallel file system. Known output directories: every one this user submitted to, plus
$HPCEVAL_OUTPUT_DIRS (os.pathsep-separated) and any passed explicitly.

Only trusted registry lines enter the index (`registry.trusted_entries`: the user's own run
directories under that output directory), so a line another user appends cannot redirect an
invocation id; a look-up checks the directory's owner again before handing it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.contract import RUN_FILE
from hpceval.errors import HpcevalError
from hpceval.records import read_run
from hpceval.runs.registry import registry_stamp, trusted_entries
from hpceval.storage import atomic_write_json, cache_dir
from hpceval.trust import owned_dir, stat_problem

INDEX_FILE = "runs.json"
INDEX_VERSION = 2  # 2: trusted entries only (older indexes are rebuilt)


class RunNotFound(HpcevalError, LookupError):
    """RUN matched no run, or several (then the message lists them)."""


@dataclass(frozen=True)
class RunRef:
    invocation_id: str
    run_dir: Path
    submitted_at: float
    user: str
    kind: str
    models: tuple[str, ...]
    sweep: bool

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> RunRef:
        return cls(str(entry["invocation_id"]), Path(entry["run_dir"]),
                   float(entry.get("submitted_at") or entry.get("registered_at") or 0.0),
                   str(entry.get("user", "")), str(entry.get("kind", "slurm")),
                   tuple(entry.get("models") or ()), bool(entry.get("sweep", False)))



def _index_path() -> Path:
    return cache_dir() / INDEX_FILE


def _read() -> dict[str, Any]:
    try:
        data = json.loads(_index_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"version": INDEX_VERSION, "output_dirs": {}}
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
        return {"version": INDEX_VERSION, "output_dirs": {}}  # an old format: rebuilt
    return data


def _lock() -> Any:
    from filelock import FileLock

    cache_dir().mkdir(parents=True, exist_ok=True)
    return FileLock(str(_index_path()) + ".lock", timeout=30)


def env_output_dirs() -> list[Path]:
    raw = os.environ.get("HPCEVAL_OUTPUT_DIRS", "")
    return [Path(os.path.expanduser(p)) for p in raw.split(os.pathsep) if p]


def remember_output_dir(output_dir: Path) -> None:
    """Add an output directory to the index (submit calls this); its runs load on next use."""
    with _lock():
        data = _read()
        data["output_dirs"].setdefault(str(output_dir), {"stamp": None, "runs": []})
        atomic_write_json(_index_path(), data)


def known_output_dirs(extra_dirs: Iterable[Path] = ()) -> list[Path]:
    """Every output directory this user submitted to, $HPCEVAL_OUTPUT_DIRS and `extra_dirs`
    (where checkpoint watches are looked for: their folders sit beside the runs)."""
    dirs = [Path(d) for d in _read()["output_dirs"]]
    return list(dict.fromkeys([*dirs, *env_output_dirs(), *extra_dirs]))


def list_runs(extra_dirs: Iterable[Path] = ()) -> list[RunRef]:
    """Every run in every known output directory, newest first (stale entries refreshed)."""
    with _lock():
        data = _read()
        dirs: dict[str, Any] = data["output_dirs"]
        for extra in [*env_output_dirs(), *extra_dirs]:
            dirs.setdefault(str(extra), {"stamp": None, "runs": []})
        changed = False
        for name, cached in dirs.items():
            stamp = registry_stamp(Path(name))
            if stamp != cached.get("stamp"):
                cached["stamp"] = stamp
                cached["runs"] = trusted_entries(Path(name))
                changed = True
        if changed:
            atomic_write_json(_index_path(), data)
    refs = {}
    for cached in dirs.values():
        for entry in cached["runs"]:
            ref = RunRef.from_entry(entry)
            refs[ref.invocation_id] = ref
    return sorted(refs.values(), key=lambda r: (r.submitted_at, r.invocation_id), reverse=True)


def ref_from_dir(run_dir: Path) -> RunRef:
    run = read_run(run_dir)
    return RunRef(run.invocation_id, run_dir, run.created_at, run.user, run.kind or "slurm",
                  tuple(m.key for m in run.models), run.sweep)


def is_path_ref(ref: str) -> bool:
    """A RUN argument names a directory only when it looks like a path: with a '/', or '.',
    '..', '~...'. A bare word is an id or prefix and always goes to the registry: a folder of
    that name in the current directory (another user may have made it in a shared output
    directory) must not decide which run `kill` acts on."""
    return "/" in ref or ref in (".", "..") or ref.startswith("~")


def _own_run_dir(path: Path) -> RunRef:
    """The run in directory `path`, if the directory and its run.json are this user's."""
    resolved = path.resolve()
    try:
        st = (resolved / RUN_FILE).lstat()
    except PermissionError as exc:  # another user's run directory
        raise RunNotFound(f"cannot read run directory {path}: permission denied") from exc
    except OSError as exc:
        raise RunNotFound(f"no run directory at {path} (no {RUN_FILE} there)") from exc
    # the rule resume, kill and status share (hpceval.trust); a setgid project folder's
    # group may write a run's files, whose scripts resume checks by sha256
    for what, found in (("directory", resolved.lstat()), (RUN_FILE, st)):
        problem = stat_problem(found, plain=what == RUN_FILE, group_write=True)
        if problem is not None:
            raise RunNotFound(f"{path} is not a run directory of yours (its {what} {problem}); "
                              "give the invocation id, which is looked up in the registry")
    return ref_from_dir(resolved)


def find_run(ref: str, extra_dirs: Iterable[Path] = ()) -> RunRef:
    """An invocation id, a unique prefix of one, or a run directory path (see is_path_ref)."""
    if not ref.strip():
        # '' is a prefix of every id and Path('') is the current directory: an unset shell
        # variable ($RUN) must never pick a run, least of all for `kill`.
        raise RunNotFound(f"empty run id {ref!r}: give an invocation id, a unique prefix of "
                          "one, or a run directory (is a shell variable unset?)")
    if is_path_ref(ref):
        return _own_run_dir(Path(os.path.expanduser(ref)))
    runs = list_runs(extra_dirs)
    # Owner checked again for the candidates only (one stat each): a directory replaced since
    # the index was built must not be handed out.
    exact = [r for r in runs if r.invocation_id == ref and owned_dir(r.run_dir)]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.invocation_id.startswith(ref) and owned_dir(r.run_dir)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(sorted({str(p.run_dir.parent) for p in runs})) or "none yet"
        raise RunNotFound(f"no run {ref!r} (searched output dirs: {known}; give a run "
                          "directory path, or add its output dir to $HPCEVAL_OUTPUT_DIRS)")
    listed = ", ".join(r.invocation_id for r in matches[:8])
    raise RunNotFound(f"{ref!r} matches {len(matches)} runs ({listed}); give more of the id")
