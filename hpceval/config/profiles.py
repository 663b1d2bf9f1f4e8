"""Find site profiles and deployment presets on the search path.

Precedence (first hit wins): ``$HPCEVAL_PROFILE_PATH``, ``~/.config/hpceval/profiles``, the
profiles shipped in ``site-configs/``, and last the run file's folder (review F2: searched first,
a ``local-dev.yaml`` dropped next to a run file in a shared folder won over every other one; now
a file there counts only for a name found nowhere else).

A profile or preset can run shell as the user (``pre_commands``, ``modules``, ``env_vars``), so
it is trusted the way ssh trusts its config (review F2, the rule in hpceval.trust): the file
must be owned by the user or root (or by an account the site names in
/etc/hpceval/trusted-owners; the shipped profiles also by the account that owns the
installation) and not writable by group or other, and no folder above it may be writable by
group or other unless it is a root-owned sticky folder such as /tmp (there nobody can rename
what is not theirs). Anything else is refused naming the file and its owner,
wherever on the search path (run file's folder, ``$HPCEVAL_PROFILE_PATH``, an ``extends:``
parent, an explicit path). The file is checked on the descriptor it is parsed from
(hpceval.trust.read_trusted), and a link counts with the folder that holds it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config import yamlio
from hpceval.config.errors import ConfigError
from hpceval.resources import install_owner, site_configs_dir
from hpceval.trust import (
    SITE_TRUST_FILE,
    Untrusted,
    my_uids,
    read_trusted,
    site_trusted_owners,
    untrusted,
)

SECTION_KEYS = {"execution", "deployment", "target", "evaluation"}
META_KEYS = {"extends", "description"}


@dataclass(frozen=True)
class ProfileDir:
    path: Path
    source: str  # "run file", "HPCEVAL_PROFILE_PATH", "user", "shipped"


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    path: Path
    source: str
    description: str
    shadows: tuple[Path, ...] = ()


def search_dirs(near: Path | None = None) -> list[ProfileDir]:
    dirs: list[ProfileDir] = []
    for entry in os.environ.get("HPCEVAL_PROFILE_PATH", "").split(os.pathsep):
        if entry:
            dirs.append(ProfileDir(Path(entry).expanduser(), "HPCEVAL_PROFILE_PATH"))
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    dirs.append(ProfileDir(config_home / "hpceval" / "profiles", "user"))
    dirs.append(ProfileDir(site_configs_dir(), "shipped"))
    if near is not None:  # last: a shared folder holding the run file overrides nothing
        dirs += [ProfileDir(near, "run file"), ProfileDir(near / "execution", "run file")]
    return dirs


def read_yaml(path: Path, what: str, raw: bytes | None = None) -> dict[str, Any]:
    """The mapping in ``path`` (from ``raw``, its bytes, where the caller read them)."""
    try:
        data = yamlio.read(path) if raw is None else yamlio.parse_bytes(raw)
    except OSError as exc:
        raise ConfigError.at(what, f"cannot read {path}: {exc.strerror}", "check the path") from exc
    except yamlio.YamlError as exc:
        where = f" line {exc.line}" if exc.line is not None else ""
        raise ConfigError.at(what, f"{path}{where}: invalid YAML: {exc.problem}",
                             exc.fix) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError.at(what, f"{path} must hold a mapping, not {type(data).__name__}",
                             "write key: value pairs at the top level")
    return data


def trusted_owners(path: Path) -> tuple[frozenset[int], str | None]:
    """Who may own ``path`` as a profile: you; the accounts the site names in
    /etc/hpceval/trusted-owners (and why that file was ignored, if it was); for the profiles
    hpceval ships, the account that owns the installation, trusted already by running it."""
    site, ignored = site_trusted_owners(SITE_TRUST_FILE)
    owners = set(my_uids()) | site
    shipped = site_configs_dir()
    if path.resolve().is_relative_to(shipped.resolve()):
        owners.add(install_owner())
    return frozenset(owners), ignored


def untrusted_reason(path: Path) -> str | None:
    """Why ``path`` may not be trusted as a profile or preset, or None (see the module doc;
    the rule itself is hpceval.trust's, with root's files and every folder above checked)."""
    owners, ignored = trusted_owners(path)
    reason = untrusted(path, owners, root=True, folders=True)
    return f"{reason} ({ignored})" if reason is not None and ignored else reason


def _read_trusted(path: Path, kind: str, key: str) -> bytes:
    """The file's bytes, read once from the descriptor its trust was checked on."""
    owners, ignored = trusted_owners(path)
    try:
        return read_trusted(path, owners, root=True, limit=yamlio.MAX_BYTES)
    except Untrusted as exc:
        reason = f"{exc} ({ignored})" if ignored else str(exc)
        raise ConfigError.at(key, f"refusing {kind} file {path}: {reason}",
                             "use a profile of your own (~/.config/hpceval/profiles) or ask its "
                             "owner; a profile runs shell as you (pre_commands, modules). A "
                             f"site names the accounts that own its profiles in {SITE_TRUST_FILE}"
                             " (root's, one user per line)") from None


@dataclass(frozen=True)
class Found:
    """A profile or preset found, trusted and parsed from one open of the file."""
    path: Path
    source: str  # how it was found: a ProfileDir source, or "path"
    data: dict[str, Any]


def _found(path: Path, source: str, kind: str, key: str, what: str) -> Found:
    return Found(path, source, read_yaml(path, what, _read_trusted(path, kind, key)))


def _candidates(name: str) -> list[str]:
    # NeMo Evaluator names its stock Slurm profile "slurm/default"; ours is "slurm".
    names = [name]
    if name.endswith("/default"):
        names.append(name[: -len("/default")])
    return names


def find_file(name: str, kind: str, near: Path | None = None,
              exclude: Path | None = None, what: str = "") -> Found:
    """Locate profile ``name`` (kind "profile") or deployment preset (kind "deployment"), and
    read it, trusted (``what`` names it in a YAML error).

    ``exclude`` is the run file itself: a run file called local.yaml that asks for the
    ``local`` profile means the shipped one, not itself.
    """
    key = "defaults.execution" if kind == "profile" else "defaults.deployment"
    what = what or f"{kind} {name}"
    if kind == "profile" and name.endswith((".yaml", ".yml")) and Path(name).expanduser().is_file():
        return _found(Path(name).expanduser(), "path", kind, key, what)
    tried: list[str] = []
    for d in search_dirs(near):
        if kind == "deployment" and d.path.name == "execution":
            continue
        base = d.path / "deployment" if kind == "deployment" else d.path
        for candidate in _candidates(name):
            for ext in (".yaml", ".yml"):
                path = base / f"{candidate}{ext}"
                if path.is_file() and (exclude is None or path.resolve() != exclude):
                    return _found(path, d.source, kind, key, what)
        tried.append(str(base))
    known = sorted({p.name for p in list_profiles()}) if kind == "profile" else []
    hint = f"known profiles: {', '.join(known)}" if known else "check the name"
    raise ConfigError.at(key, f"{kind} {name!r} not found in " + ", ".join(tried), hint)


def split_profile(data: dict[str, Any]) -> dict[str, Any]:
    """A profile is either sectioned (execution:, deployment:, ...) or bare execution keys."""
    body = {k: v for k, v in data.items() if k not in META_KEYS}
    if SECTION_KEYS & set(body):
        return body
    return {"execution": body} if body else {}


def list_profiles() -> list[ProfileInfo]:
    """Every profile on the search path (run-file folders aside), with what it shadows."""
    found: dict[str, ProfileInfo] = {}
    for d in search_dirs():
        if not d.path.is_dir():
            continue
        for path in sorted(d.path.rglob("*.y*ml")):
            rel = path.relative_to(d.path)
            if rel.parts[0] == "deployment" or path.suffix not in (".yaml", ".yml"):
                continue
            name = str(rel.with_suffix(""))
            if name in found:
                prev = found[name]
                found[name] = ProfileInfo(prev.name, prev.path, prev.source, prev.description,
                                          (*prev.shadows, path))
                continue
            try:
                description = str(read_yaml(path, "profile").get("description", ""))
            except ConfigError as exc:
                description = f"(unreadable: {exc})"
            found[name] = ProfileInfo(name, path, d.source, description.strip().splitlines()[0]
                                      if description.strip() else "")
    return sorted(found.values(), key=lambda p: p.name)
