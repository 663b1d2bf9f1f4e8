"""Container image names: the docker reference, the SIF file staged from it, and the spelling
pyxis/enroot want (which file each runtime runs is the runtime's: ``hpceval.runtimes``). Pure
string rules, imported by config, render, staging and the runtimes alike (so it imports none
of them)."""

from __future__ import annotations

import re

DOCKER = "docker://"
_HOSTLIKE = re.compile(r"[.:]|^localhost$")


def sif_name(reference: str) -> str:
    """The catalogue's SIF naming rule: the last two repository path components and the tag
    (``nvcr.io/nvidia/eval-factory/simple-evals:26.03`` -> ``eval-factory_simple-evals_26.03.sif``);
    a digest adds ``sha256-<12 hex>``."""
    ref = reference.removeprefix(DOCKER)
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = ""
    if ":" in last:  # a ':' in the last component is the tag, not a registry port
        name, _, tag = name.rpartition(":")
    parts = name.split("/")
    if len(parts) > 1 and _HOSTLIKE.search(parts[0]):
        parts = parts[1:]
    stem = "_".join([*parts[-2:], *([tag] if tag else [])])
    if digest:
        algo, _, hexpart = digest.partition(":")
        stem += f"_{algo}-{hexpart[:12]}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem) + ".sif"


def pyxis_reference(reference: str) -> str:
    """A docker reference as pyxis and enroot spell it: the registry host, if any, is
    followed by '#' (``nvcr.io/nvidia/x:1`` -> ``nvcr.io#nvidia/x:1``)."""
    ref = reference.removeprefix(DOCKER)
    first, sep, rest = ref.partition("/")
    return f"{first}#{rest}" if sep and _HOSTLIKE.search(first) else ref
