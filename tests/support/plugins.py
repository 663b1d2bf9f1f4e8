"""Throwaway distributions (tests/plugins/*) installed as a user installs one: each folder is
packed into a wheel (a zip with a dist-info: no build backend needed) and installed with pip
into a folder of its own, which a fresh interpreter then has on its path.

hpceval reads some registries' names once per interpreter (config.schema's execution.type
choices are the backend registry's names when it is first imported), so a plugin is only
fully there in an interpreter that had it on its path from the start: the tests that need
one run in a subprocess (``plugin_env``), never by adding the folder to this one's sys.path.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from support import TESTS

PLUGINS = TESTS / "plugins"
ROOT = TESTS.parent


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path, plugin: Path, name: str, version: str,
                modules: tuple[str, ...]) -> Path:
    """The wheel of distribution ``name`` into ``folder``: ``modules`` (files or package
    folders of ``plugin``, every file below a folder included) and its entry_points.txt."""
    dist = f"{name.replace('-', '_')}-{version}"
    files: dict[str, bytes] = {}
    for module in modules:
        path = plugin / module
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        files.update({p.relative_to(plugin).as_posix(): p.read_bytes() for p in found
                      if "__pycache__" not in p.parts})
    files[f"{dist}.dist-info/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                           f"Version: {version}\n").encode()
    files[f"{dist}.dist-info/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: hpceval-tests\n"
                                        b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{dist}.dist-info/entry_points.txt"] = (plugin / "entry_points.txt").read_bytes()
    record = [_record_line(n, data) for n, data in files.items()]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join([*record, f"{dist}.dist-info/RECORD,,"])
                                         + "\n").encode()
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for n, data in files.items():
            archive.writestr(n, data)
    return wheel


def pip_install(wheel: Path, site: Path) -> Path:
    """``pip install --target site`` of one wheel, offline and without dependencies."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(wheel)],
                   check=True, timeout=120)
    return site


def plugin_env(site: Path, **extra: str) -> dict[str, str]:
    """This environment with hpceval's checkout and ``site`` first on PYTHONPATH: the
    environment of an interpreter that has the plugin installed from its start."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(site), os.environ.get("PYTHONPATH", "")) if p)
    return env
