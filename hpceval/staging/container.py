"""Reading files inside a SIF image with the container runtime (``apptainer exec``).

Only a few fixed command lines are run, so that the strict fake apptainer of the tests can
check each one exactly.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hpceval.errors import HpcevalError

# Every framework definition file, skipping the kernel's virtual file systems.
FIND = ["find", "/", "(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/dev", ")",
        "-prune", "-o", "-type", "f", "-name", "framework.yml", "-path", "*/core_evals/*",
        "-print"]


class DiscoverError(HpcevalError, RuntimeError):
    """The image could not be read, or what it holds cannot become a catalogue file."""


def run_in_image(runtime: str, sif: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which(runtime)
    if binary is None:
        raise DiscoverError(f"{runtime} not found on PATH (load its module, or pass --runtime)")
    # --contain: nothing of the host's home or /tmp shows up in `find /`; --cleanenv: the
    # host's Python variables cannot change what the image's tools do.
    return subprocess.run([binary, "exec", "--contain", "--cleanenv", str(sif), *argv],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)


def read_frameworks(runtime: str, sif: Path) -> list[tuple[str, str]]:
    """(path inside the image, text) of every framework.yml in the image."""
    inspect = shutil.which(runtime)
    if inspect is not None:  # a clear "not an image" before any exec
        proc = subprocess.run([inspect, "inspect", "--json", str(sif)], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            raise DiscoverError(f"{sif} is not a readable image: {_tail(proc)}")
    found = run_in_image(runtime, sif, FIND)
    paths = [p for p in found.stdout.splitlines() if p.strip()]
    # find exits 1 on unreadable folders while still printing what it found
    if not paths:
        why = _tail(found) if found.returncode != 0 else "no core_evals/*/framework.yml in it"
        raise DiscoverError(f"{sif}: {why}")
    texts: list[tuple[str, str]] = []
    for path in sorted(paths):
        cat = run_in_image(runtime, sif, ["cat", path])
        if cat.returncode != 0:
            raise DiscoverError(f"{sif}: cannot read {path}: {_tail(cat)}")
        texts.append((path, cat.stdout))
    return texts


def read_installed_frameworks(folder: Path) -> list[tuple[str, str]]:
    """(path, text) of every framework.yml that harness packages installed into a venv (or a
    site-packages folder) hold: the same files the images carry, for `container_runtime: none`."""
    patterns = ("lib/python*/site-packages/core_evals/*/framework.yml",
                "core_evals/*/framework.yml")
    paths = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    if not paths:
        raise DiscoverError(f"{folder}: no core_evals/*/framework.yml in it (a venv with "
                            "nvidia-* harness packages, or its site-packages)")
    return [(str(p), p.read_text(encoding="utf-8")) for p in paths]


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(lines[-3:]) or f"exit status {proc.returncode}"
