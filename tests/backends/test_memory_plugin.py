"""A second scheduler is one package, one partials folder and one entry point: the memory
backend of tests/plugins/memory_backend, installed as a user installs a plugin (a wheel, pip,
a folder of its own), passes the backend conformance suite and runs the controller's tests.

hpceval.config.schema reads execution.type's choices from the backend registry once, when it is
first imported, and this interpreter imported it long ago. So the tests that need the plugin
run in a fresh pytest whose PYTHONPATH has the plugin's folder from the start, exactly as an
installed plugin is there; in this interpreter they skip (or, for the conformance rig, are not
parametrized). One pip install per session (the fixture `memory_site`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.plugins import PLUGINS, ROOT, build_wheel, pip_install, plugin_env

PLUGIN = PLUGINS / "memory_backend"
# the modules that use the plugin where it is installed, and which of their tests to run
SUITE = ("tests/backends/test_conformance.py", "tests/backends/test_template_dialect.py",
         "tests/runs/test_memory_controller.py")
SELECT = "memory or every_backend_has_every_partial"


@pytest.fixture(scope="session")
def memory_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's wheel, installed with pip into a folder of this session's."""
    folder = tmp_path_factory.mktemp("memory-plugin")
    wheel = build_wheel(folder, PLUGIN, "hpceval-memory-backend", "0.1",
                        ("hpceval_memory_backend",))
    return pip_install(wheel, folder / "site")


def test_pip_installs_the_package_its_partials_and_its_entry_point(memory_site: Path) -> None:
    package = memory_site / "hpceval_memory_backend"
    assert (package / "__init__.py").is_file() and (package / "cluster.py").is_file()
    assert sorted(p.name for p in (package / "partials").glob("*.j2")) == [
        "detach.j2", "discover.j2", "env.j2", "launch.j2", "preempted.j2", "stop.j2",
        "successor.j2"]
    points = (memory_site / "hpceval_memory_backend-0.1.dist-info" / "entry_points.txt")
    assert "[hpceval.backends]\nmemory = " in points.read_text()


def test_the_memory_backend_passes_the_conformance_suite_and_the_controller_tests(
        memory_site: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slurm",
         "--basetemp", str(tmp_path / "inner"), "-k", SELECT, *SUITE],
        cwd=ROOT, env=plugin_env(memory_site), capture_output=True, text=True, check=False,
        timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    summary = out.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    # every selected test ran (none skipped: the plugin was importable), the rig's six included
    assert passed is not None and int(passed.group(1)) >= 19, summary
    assert "skipped" not in summary and "deselected" in summary, summary


def test_the_loader_reads_a_package_folder_and_nothing_above_or_beside_it() -> None:
    """The seam itself, in this interpreter: a "package:folder/name" template comes from the
    folder that package ships; a name that climbs out of it, or names no package, is not found
    (the built-in partials stay under templates/)."""
    import jinja2

    from hpceval.render.quoting import partials_folder, shipped_environment
    from hpceval.resources import templates_dir

    env = shipped_environment()
    source = env.loader.get_source(env, "hpceval.tasks:lm_eval_tasks/judged_qa/utils.py")
    assert "def " in source[0] and source[1].endswith("judged_qa/utils.py")
    for name in ("hpceval.tasks:../render/quoting.py", "hpceval_no_such_package:partials/env.j2",
                 "hpceval.contract:x.j2", "not a package:env.j2", "backends/memory/env.j2"):
        with pytest.raises(jinja2.TemplateNotFound):
            env.get_template(name)
    assert partials_folder("backends/slurm") == templates_dir() / "backends" / "slurm"
