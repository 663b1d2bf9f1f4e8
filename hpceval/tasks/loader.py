"""Find catalogue files, and keep a JSON index of them so `hpceval ls tasks` stays fast.

Parsing ~25 YAML files (with Jinja syntax checks) costs a few hundred milliseconds; reading one
JSON index costs a few. The index is keyed by every catalogue file's path, mtime and size, the
user catalogue directories, the hpceval version and the index format, so editing or adding any
catalogue file (package or user) rebuilds it. When the cache directory is not writable the index
lives in memory for the life of the process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from hpceval.storage import cache_dir
from hpceval.tasks.definitions import CatalogueError
from hpceval.trust import Untrusted, read_trusted, untrusted

INDEX_FORMAT = 1
MAX_CATALOGUE_BYTES = 8 << 20  # the package's largest file is 15 KiB
MAX_INDEX_BYTES = 64 << 20  # the whole catalogue's index is ~270 KiB; larger: rebuilt
_CATALOGUE_DIR = Path(__file__).resolve().parent / "catalogue_data"
_SUFFIXES = (".yaml", ".yml")
_MEMORY: dict[str, dict[str, Any]] = {}
_NORMALISING_MODULES = ("schema.py", "assemble.py", "loader.py", "definitions.py")
log = logging.getLogger(__name__)


def package_catalogue_dir() -> Path:
    return _CATALOGUE_DIR


def user_catalogue_paths() -> list[Path]:
    """User catalogue locations, lowest priority first: the config dir, then $HPCEVAL_TASKS_PATH."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    paths = [Path(config_home) / "hpceval" / "tasks"]
    for entry in os.environ.get("HPCEVAL_TASKS_PATH", "").split(os.pathsep):
        if entry.strip():
            paths.append(Path(entry).expanduser())
    return paths



def catalogue_files(user_paths: list[Path] | None = None) -> list[Path]:
    """Package files (sorted), then each user path's files (sorted); a path may name one file.
    A user file must pass hpceval.trust's rule (see check_trusted)."""
    files = _yaml_files(_CATALOGUE_DIR)
    for path in user_catalogue_paths() if user_paths is None else user_paths:
        files.extend(check_trusted(f) for f in _yaml_files(path))
    return files


def check_trusted(path: Path) -> Path:
    """`path`, a user catalogue file, or CatalogueError naming it and its owner. Its harness
    and task command templates run as the user in the job, so it is trusted as a profile is:
    owned by the user or root, not writable by group or other, no folder above writable by
    others (a 1777 or group-writable $HPCEVAL_TASKS_PATH entry would let anyone plant one).
    Checked on every load, the cached index too: a chmod changes no mtime. A file that is
    parsed is checked again on the descriptor it is read from (_read_catalogue)."""
    problem = untrusted(path, root=True, folders=True)
    if problem is not None:
        raise _refusal(path, problem)
    return path


def _refusal(path: Path, problem: str) -> CatalogueError:
    return CatalogueError(str(path), "", f"refusing this task catalogue: {problem} (its "
                          "command templates run as you in the job); fix: if it is yours, "
                          "chmod go-w it and its folders, else copy it into a folder of your "
                          "own (~/.config/hpceval/tasks) and drop the other from "
                          "$HPCEVAL_TASKS_PATH")


def _read_catalogue(path: Path) -> bytes:
    """A catalogue file's bytes: the package's as they are, a user's read_trusted (checked on
    the descriptor read from: nothing swaps it between the check and the read)."""
    if path.is_relative_to(_CATALOGUE_DIR):
        return path.read_bytes()
    try:
        raw = read_trusted(path, root=True, limit=MAX_CATALOGUE_BYTES)
    except Untrusted as exc:
        raise _refusal(path, str(exc)) from None
    if len(raw) > MAX_CATALOGUE_BYTES:
        raise CatalogueError(str(path), "", f"larger than {MAX_CATALOGUE_BYTES >> 20} MiB")
    return raw


def _yaml_files(path: Path) -> list[Path]:
    try:
        if path.is_file():
            return [path]
        with os.scandir(path) as entries:
            return sorted(
                Path(e.path) for e in entries if e.name.endswith(_SUFFIXES) and e.is_file()
            )
    except OSError:  # a missing or unreadable user dir is simply empty
        return []


def index_key(files: list[Path], user_paths: list[Path]) -> str:
    stats = [_stat(f) for f in files]
    payload = [INDEX_FORMAT, _code_version(), [str(p) for p in user_paths], stats]
    # The key is the payload itself (a few KB): exact, and no hashlib/OpenSSL import (~5 ms).
    return json.dumps(payload, separators=(",", ":"))


def _stat(path: Path) -> list[object]:
    st = path.stat()
    return [str(path), st.st_mtime_ns, st.st_size]


def _code_version() -> list[object]:
    """What identifies the code that built an index: the installed hpceval version (the name of
    its dist-info folder beside the package) and the stat of the modules that normalise files,
    so an upgrade or a source edit rebuilds it. importlib.metadata would cost ~25 ms per call;
    a targeted glob costs well under one."""
    package_root = _CATALOGUE_DIR.parent.parent  # .../hpceval
    dist = sorted(p.name for p in package_root.parent.glob("hpceval-*.dist-info"))
    modules = [_stat(package_root / "tasks" / m) for m in _NORMALISING_MODULES]
    return [dist, modules]


def load_index() -> dict[str, Any]:
    """Return the catalogue index: from memory, else the on-disk cache, else parse the YAML."""
    user_paths = user_catalogue_paths()
    files = catalogue_files(user_paths)
    key = index_key(files, user_paths)
    if key in _MEMORY:
        return _MEMORY[key]  # warned when it was loaded
    cache_file = cache_dir() / "tasks-index.json"
    index = _read_cache(cache_file, key)
    if index is None:
        index = build_index(files, strict=False)
        index["key"] = key
        _write_cache(cache_file, index)
    _MEMORY.clear()  # one live catalogue per process is enough; drop stale ones
    _MEMORY[key] = index
    warn_skipped(index)
    return index


def clear_memory_cache() -> None:
    """Forget the in-process index (tests use this to exercise the on-disk cache)."""
    _MEMORY.clear()


def build_index(files: list[Path], strict: bool = True) -> dict[str, Any]:
    """The index of ``files``; CatalogueError for a malformed one (``strict``: validation).
    Not ``strict`` (every command's load): a user file that is malformed (or clashes with
    another) is left out and named in the index's "skipped", not allowed to break every
    command, unrelated runs included (shared-cluster-4 N9); one of the package's still raises."""
    from hpceval.tasks.assemble import assemble

    skipped: list[list[str]] = []
    documents: list[tuple[str, object]] = []
    for path in files:
        try:
            documents.append((str(path), _parse_yaml(path)))
        except CatalogueError as exc:
            _skip_or_raise(exc, path, skipped, strict)
    while True:
        try:
            harnesses, tasks = assemble(documents)
        except CatalogueError as exc:
            _skip_or_raise(exc, Path(exc.source), skipped, strict)
            documents = [(source, data) for source, data in documents if source != exc.source]
            continue
        return {"format": INDEX_FORMAT, "harnesses": harnesses, "tasks": tasks,
                "skipped": skipped}


def _skip_or_raise(exc: CatalogueError, path: Path, skipped: list[list[str]],
                   strict: bool) -> None:
    if strict or path.is_relative_to(_CATALOGUE_DIR) or any(s[0] == str(path) for s in skipped):
        raise exc
    skipped.append([str(path), str(exc)])


def warn_skipped(index: dict[str, Any]) -> None:
    """One warning per user catalogue file the index left out, naming it and why."""
    for source, reason in index.get("skipped", []):
        log.warning("hpceval: warning: task catalogue %s left out: %s", source, reason)


def _parse_yaml(path: Path) -> object:
    import yaml

    # libyaml's loader is ~10x faster than the pure-Python one; fall back when it is missing.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        text = _read_catalogue(path).decode("utf-8")
    except OSError as exc:
        raise CatalogueError(str(path), "", f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CatalogueError(str(path), "", f"not UTF-8 text: {exc.reason}") from exc
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogueError(str(path), where, f"YAML syntax error: {problem}") from exc


def _read_cache(path: Path, key: str) -> dict[str, Any] | None:
    try:
        # an index another user could have written (a shared $HPCEVAL_CACHE_DIR) could hold
        # any command template under a key anyone can compute from stat(): rebuild instead
        data = json.loads(read_trusted(path, limit=MAX_INDEX_BYTES))
    except (Untrusted, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or data.get("format") != INDEX_FORMAT:
        return None
    return data


def _write_cache(path: Path, index: dict[str, Any]) -> None:
    # Write to a temp file in the same directory, then rename: readers on other nodes of a
    # shared home never see a half-written index. Any failure just leaves the index in memory.
    import tempfile

    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".tasks-index.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(index, fh, separators=(",", ":"))
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError:
        pass
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
