"""Container image names: the docker reference, the SIF file staged from it, and the spelling
pyxis/enroot want (which file each runtime runs is the runtime's: ``hpceval.runtimes``); and
the one rule for whether an image file is there to run (image_file_problem), and what format a
file's first bytes say it is (image_format, format_problem). Imported by
config, render, staging, runs and the runtimes alike (so it imports none of them)."""

from __future__ import annotations

import os
import re
import stat

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


def image_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not an image file a job can run, in words that follow "is" in a message
    ("missing", "empty", ...); None when it is one. The one rule that the runtime's choice of a
    staged image, the submit preflight and resume's check of the pulled images all ask, so a
    file one of them takes is a file the others take.

    A file here is a regular file (a symlink to one counts), not empty, that this user may
    read. A directory is not one: apptainer would run it as a sandbox, but every image hpceval
    stages or pulls is a single file (SIF, SquashFS), and a folder where one belongs is
    someone's mistake. A runtime that runs directory images (Charliecloud) would get its own
    rule beside this one, not a looser one here. Checked from the login node, on the shared
    storage the jobs read; the jobs check on the node with this rule's shell spelling,
    templates/image_file.j2 (tests/runs/test_image_file_rule.py keeps the two equal)."""
    try:
        info = os.stat(path)  # follows symlinks: a dangling one raises FileNotFoundError
    except PermissionError:
        return "unreadable (a folder above it cannot be searched)"
    except OSError:
        return "a symlink to nothing" if os.path.islink(path) else "missing"
    if stat.S_ISDIR(info.st_mode):
        return "a directory, not an image file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size == 0:
        return "empty"  # a pull that died before writing anything
    if not os.access(path, os.R_OK):
        return "unreadable"
    return None


def usable_image_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an image file a job can run (image_file_problem finds nothing)."""
    return image_file_problem(path) is None


# What a file's first bytes say it is: the formats container runtimes run, and the files most
# often found where one belongs (an image not converted yet, a download that saved a web page).
FORMATS = {"sif": "a SIF image", "squashfs": "a SquashFS image",
           "tar": "a tar archive (docker save, or an unconverted layer)", "gzip": "a gzip file",
           "zstd": "a zstd file", "html": "a web page (a download that saved an error page)"}
_HEAD_BYTES = 512


def image_format(path: str | os.PathLike[str]) -> str | None:
    """The key of FORMATS that the first bytes of ``path`` match; None when they match none
    (or it cannot be read: image_file_problem says why)."""
    try:
        with open(path, "rb") as file:
            head = file.read(_HEAD_BYTES)
    except OSError:
        return None
    if head[:4] == b"hsqs":  # SquashFS superblock magic, little-endian (enroot's .sqsh too)
        return "squashfs"
    if b"SIF_MAGIC" in head[:64]:  # after the launch line "#!/usr/bin/env run-singularity"
        return "sif"
    if head[257:262] == b"ustar":
        return "tar"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    return None


def format_problem(path: str | os.PathLike[str], runtime: str,
                   runs: frozenset[str]) -> str | None:
    """Why ``path`` is not an image that ``runtime`` runs (formats ``runs``), in words that
    follow "is" in a message; None when it is one, or its first bytes match no format known
    here (then the runtime itself judges it)."""
    found = image_format(path)
    if found is None or found in runs:
        return None
    wanted = " or ".join(FORMATS[name].removeprefix("a ") for name in sorted(runs))
    return f"{FORMATS[found]}, which {runtime} does not run (it runs {wanted} files)"
