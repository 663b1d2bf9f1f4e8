"""The serving-engine and container-runtime registries: each engine and runtime is one class in
one module, found by name; no other module (or template) tests a deployment type or a runtime
by its name, so adding one touches its own module and its tests only."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from hpceval.config.schema import DeploymentSpec, ExecutionSpec
from hpceval.engines import engine_for, engine_names
from hpceval.runtimes import runtime_for, runtime_names

ROOT = Path(__file__).parents[2]
_NAMES = "|".join(sorted({*engine_names(), *runtime_names()}))
# names specific enough to flag as dict keys ("command"/"none" are common keys elsewhere)
_KEYS = "|".join(sorted({*engine_names(), *runtime_names()} - {"command", "none"}))
# A type or runtime test by name: `x.type == "vllm"`, `runtime in ("pyxis", ...)`, a table keyed
# by names (`{"apptainer": "..."}`), or `"enroot" if runtime == "pyxis"`.
_BY_NAME = re.compile(
    r"""\b(type|container_runtime|runtime)\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{]?\s*"""
    rf"""["']({_NAMES})["']|["']({_KEYS})["']\s*:\s*["']""")


# A test of where a server or harness runs by its word (deployment.runtime, harness.runtime):
# `dep.runtime == "host"`, `runtime not in ("container", "host")`, `.get("runtime", "container")`;
# the words are hpceval.runtimes.PLACES and only from_image reads them.
_BY_PLACE = re.compile(
    r"""(==|!=|\bin\b)\s*[(\[{]?\s*["'](container|host)["']|["'](container|host)["']\s*(==|!=)"""
    r"""|["']runtime["']\s*,\s*["'](container|host)["']""")


def _sources() -> list[Path]:
    files = [*(ROOT / "hpceval").rglob("*.py"), *(ROOT / "templates").rglob("*.j2")]
    return [p for p in files if not {"engines", "runtimes"} & set(p.parts)]


def test_no_template_tests_an_engine_or_runtime_by_name() -> None:
    # Python modules are parsed instead (tests/engines/test_name_sites.py)
    offenders = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                 for path in _sources() if path.suffix == ".j2"
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _BY_NAME.search(line)]
    assert offenders == []


def test_where_a_server_or_harness_runs_is_read_in_one_place() -> None:
    # the rule `runtime == "container"` (and its `!= "host"` forms) was spelt in 7 modules
    offenders = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                 for path in _sources()
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _BY_PLACE.search(line)]
    assert offenders == []
    for line in ['if dep.runtime == "host":', "if aux.runtime != 'container':",
                 'if runtime not in ("container", "host"):', '{% if d.runtime == "host" %}',
                 'dep.get("runtime", "container")', 'if "host" == runtime:']:
        assert _BY_PLACE.search(line), line
    assert not _BY_PLACE.search('facts["host"] = socket.gethostname()')


def test_serves_from_image_is_the_engine_and_the_runtime() -> None:
    from hpceval.runtimes import HOST, IMAGE, PLACES, from_image

    assert PLACES == (IMAGE, HOST) == ("container", "host")  # the words run files carry
    assert from_image(IMAGE) and not from_image(HOST)
    assert DeploymentSpec(type="vllm").serves_from_image  # the default runtime: container
    assert not DeploymentSpec(type="vllm", runtime=HOST).serves_from_image
    assert not DeploymentSpec(type="none").serves_from_image  # an endpoint: nothing served
    hints = typing.get_type_hints(DeploymentSpec)
    assert typing.get_args(hints["runtime"]) == PLACES


def test_the_pattern_catches_the_forms_it_forbids() -> None:
    for line in ['if dep.type == "vllm":', "if runtime == 'pyxis':",
                 'if aux.type in ("vllm", "sglang"):', 'x = {"apptainer": "APPTAINERENV_"}',
                 '{% if d.type == "command" %}', 'if ex.container_runtime != "none":']:
        assert _BY_NAME.search(line), line
    assert not _BY_NAME.search('if dep.runtime == "host":')  # container or host: not a runtime


def test_the_schema_choices_are_the_registries() -> None:
    hints = typing.get_type_hints(DeploymentSpec)
    assert typing.get_args(hints["type"]) == engine_names() == ("none", "vllm", "sglang",
                                                                "command")
    hints = typing.get_type_hints(ExecutionSpec)
    assert typing.get_args(hints["container_runtime"]) == runtime_names() == (
        "apptainer", "singularity", "pyxis", "none", "docker", "podman", "charliecloud")


def test_unknown_names_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown serving engine 'trtllm'.*vllm, sglang"):
        engine_for("trtllm")
    with pytest.raises(ValueError, match=r"unknown container runtime 'lxc'.*apptainer"):
        runtime_for("lxc")


def test_each_engine_declares_a_template_that_exists_and_one_module_each() -> None:
    modules = set()
    for name in engine_names():
        engine = engine_for(name)
        assert (ROOT / "templates" / engine.template).is_file(), name
        modules.add(type(engine).__module__)
    assert len(modules) == len(engine_names())
    assert len({type(runtime_for(n)).__module__ for n in runtime_names()}) == len(runtime_names())


def test_engine_capabilities() -> None:
    vllm, sglang, command, none = (engine_for(n) for n in ("vllm", "sglang", "command", "none"))
    assert not none.serves and all(e.serves for e in (vllm, sglang, command))
    assert vllm.token_env == "VLLM_API_KEY" and sglang.token_env == "HPCEVAL_SGLANG_API_KEY"
    assert vllm.ready_line and sglang.ready_line
    assert sglang.listens_on_node and not vllm.listens_on_node
    assert command.needs_command and command.port_env and not command.parallel
    spec = DeploymentSpec(type="command", tensor_parallel_size=2, gpus_per_instance=None)
    assert command.gpu_need(spec, 4) == 4 and vllm.gpu_need(spec, 4) == 2
    assert vllm.uses_ray(DeploymentSpec(multi_node_backend="ray"), 2)
    assert not vllm.uses_ray(DeploymentSpec(multi_node_backend="ray"), 1)
    assert not sglang.uses_ray(DeploymentSpec(multi_node_backend="ray"), 2)
