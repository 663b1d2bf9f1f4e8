"""What every API verb starts from: a run configuration, or a run already submitted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from hpceval.config import ResolvedConfig
    from hpceval.runs.index import RunRef

# A run file path, a run config as a dict, configs already resolved (what `load` returns), or
# None (the defaults and the profile alone). Union, not |: the names are imported for type
# checking only, and a string cannot be |-ed at runtime.
ConfigSource = Union[str, Path, Mapping[str, Any], Sequence["ResolvedConfig"], None]  # noqa: UP007
# A submitted run: an invocation id, a unique prefix of one, a run directory, or a RunRef.
RunSource = Union[str, Path, "RunRef"]


def load(config: ConfigSource, overrides: Sequence[str] = (), *, profile: str | None = None,
         check_environment: bool = True) -> list[ResolvedConfig]:
    """Every model's resolved config (one for a plain run, one per model of a sweep).

    Raises ConfigError (exit 2) with every issue found; nothing is written."""
    from hpceval.config import ResolvedConfig, load_run

    if isinstance(config, Sequence) and not isinstance(config, str):
        resolved = list(config)
        if not all(isinstance(c, ResolvedConfig) for c in resolved):
            raise TypeError("a sequence config must hold ResolvedConfig (from hpceval.api.load)")
        return resolved
    if isinstance(config, Mapping):
        import tempfile

        import yaml

        with tempfile.TemporaryDirectory(prefix="hpceval-api-") as tmp:
            # not named after a profile: profiles are also looked up next to the run file
            path = Path(tmp) / "api-run.yaml"
            path.write_text(yaml.safe_dump(dict(config), sort_keys=False), encoding="utf-8")
            return load_run(path, list(overrides), profile=profile,
                            check_environment=check_environment)
    run_file = Path(config) if config is not None else None
    return load_run(run_file, list(overrides), profile=profile,
                    check_environment=check_environment)


def find(run: RunSource, output_dirs: Iterable[str | Path] = ()) -> RunRef:
    """The run an id, a unique prefix of one, or a run directory names (RunNotFound if none).

    ``output_dirs`` are searched beside the index and $HPCEVAL_OUTPUT_DIRS."""
    from hpceval.runs.index import RunRef, find_run

    if isinstance(run, RunRef):
        return run
    return find_run(str(run), [Path(d) for d in output_dirs])


def find_watch(watch: str | Path, output_dirs: Iterable[str | Path] = ()) -> Path:
    """The directory of a checkpoint watch (its id, a prefix of one, or its directory)."""
    from hpceval.watch.control import find_watch as find_watch_dir

    return find_watch_dir(str(watch), [Path(d) for d in output_dirs])


def is_watch(ref: str) -> bool:
    """Whether RUN names a checkpoint watch (watch-...) rather than a run."""
    from hpceval.watch.control import is_watch_ref

    return is_watch_ref(ref)
