"""Pull one image into a SIF file: decide whether it is needed, then write it atomically.

A SIF is pulled to a temporary name in its final folder and renamed into place, so a job that
starts meanwhile (or an interrupted pull) never sees half an image. Beside it, ``<sif>.json``
records what was pulled (reference, registry digest when skopeo could tell, size), which is how
a later ``hpceval stage`` knows the file is current without pulling again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.errors import HpcevalError
from hpceval.images import DOCKER
from hpceval.runtimes import runtime_for
from hpceval.staging.images import read_sidecar, sidecar_path
from hpceval.storage import atomic_write_json

SIDECAR_FORMAT = 1
_SKOPEO_TIMEOUT = 120


class PullError(HpcevalError, RuntimeError):
    """The container runtime could not pull an image; the message carries its own words."""


@dataclass(frozen=True)
class Decision:
    pull: bool
    reason: str


def remote_digest(reference: str) -> str | None:
    """The registry's current digest for a reference, via skopeo when it is installed; None
    when skopeo is missing or cannot reach the registry (then the sidecar is trusted)."""
    if "@" in reference:
        return reference.partition("@")[2]
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        return None
    try:
        proc = subprocess.run([skopeo, "inspect", "--format", "{{.Digest}}", DOCKER + reference],
                              capture_output=True, text=True, timeout=_SKOPEO_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    digest = proc.stdout.strip()
    return digest if proc.returncode == 0 and digest.startswith("sha256:") else None


def decide(sif: Path, reference: str, digest: str | None, *, force: bool = False) -> Decision:
    """Whether ``sif`` must be (re)pulled from ``reference`` (remote ``digest`` if known)."""
    if force:
        return Decision(True, "--force")
    if not sif.exists():
        return Decision(True, "missing")
    sidecar = read_sidecar(sif)
    if sidecar is None:
        # Someone else put it there (an admin, a manual pull): never overwrite it unasked.
        return Decision(False, f"present, not staged by hpceval (no {sidecar_path(sif).name}); "
                               "kept (--force pulls it again)")
    if sidecar["reference"] != reference:
        return Decision(True, f"holds {sidecar['reference']}, the run needs {reference}")
    if sidecar.get("size") is not None and sidecar["size"] != sif.stat().st_size:
        return Decision(True, "size differs from what was staged (replaced or truncated)")
    staged = sidecar.get("digest")
    if digest is not None and staged is not None and digest != staged:
        return Decision(True, f"tag moved: registry has {digest}, staged {staged}")
    if digest is not None and staged == digest:
        return Decision(False, f"up to date (digest {digest})")
    return Decision(False, "up to date (same reference; digest not checked: no skopeo)")


def pull(runtime: str, sif: Path, reference: str, digest: str | None,
         purpose: str) -> dict[str, Any]:
    """Pull into a temp file beside ``sif``, rename it into place, write the sidecar; returns
    the sidecar record. With a known digest the pull names it, so the file is exactly the
    recorded image even if the tag moves during the pull. For pyxis the image is a .sqsh
    made by ``enroot import``."""
    kind = runtime_for(runtime)
    tool = kind.tool
    binary = shutil.which(tool)
    if binary is None:
        raise PullError(f"{tool} not found on PATH (load its module, e.g. "
                        f"`module load {tool}`, or run stage where it is installed)")
    name, _, _ = reference.partition("@")
    if digest is not None:
        last = name.rsplit("/", 1)[-1]
        repo = name.rpartition(":")[0] if ":" in last else name
        source = f"{DOCKER}{repo}@{digest}"  # tag and digest together are not accepted
    else:
        source = DOCKER + reference
    sif.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp reserves a unique name (two stagers never share one); --force lets the runtime
    # write over that empty placeholder.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{sif.name}.", suffix=".pulling", dir=sif.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 would hide the image from the site's group
    if not kind.pull_over_file:
        tmp.unlink()  # e.g. enroot import refuses to write over a file; the name stays unique
    try:
        proc = subprocess.run(kind.pull_argv(binary, tmp, source),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              check=False)
        what = f"{tool} {kind.pull_verb} {source}"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise PullError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
        if not tmp.exists() or tmp.stat().st_size == 0:
            raise PullError(f"{what} exited 0 but wrote nothing")
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, sif)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    record = {"format": SIDECAR_FORMAT, "reference": reference, "digest": digest,
              "pulled_from": source, "runtime": runtime, "purpose": purpose,
              "size": sif.stat().st_size, "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_json(sidecar_path(sif), record)
    return record


@contextlib.contextmanager
def image_lock(sif: Path, timeout: float = 6 * 3600) -> Any:
    """One pull per SIF at a time across stagers sharing the folder (NFS-safe filelock);
    the waiter then re-decides and usually finds the image up to date."""
    from filelock import FileLock

    sif.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(sif.with_name(f".{sif.name}.lock")), timeout=timeout):
        yield

