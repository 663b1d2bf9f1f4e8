"""``hpceval config show``: the resolved configuration and where each value came from."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from hpceval.cli.options import config_options, load_all


@click.group()
def config() -> None:
    """Inspect configurations."""


@config.command("show")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print {config, sources, layout} as JSON.")
@click.option("--no-sources", is_flag=True, help="Leave out the per-key source comments.")
def show(config_file: str | None, config_opt: str | None, config_dir: str | None,
         config_name: str | None, profile: str | None, overrides: tuple[str, ...],
         as_json: bool, no_sources: bool) -> None:
    """Print the fully resolved configuration, each key with the layer it came from.

    Layers, later winning: schema default, site profile, deployment preset, run file, -o.
    """
    configs = load_all(config_file, config_opt, config_dir, config_name, profile, overrides,
                       check_environment=False)
    if as_json:
        shown = [_json_view(resolved) for resolved in configs]
        click.echo(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2, sort_keys=True))
        return
    for index, resolved in enumerate(configs):
        if len(configs) > 1:  # a sweep: every model's configuration, one after the other
            spec = resolved.spec
            name = spec.served_name
            click.echo(f"# ===== model {index + 1} of {len(configs)}: {name} =====")
        _show_one(resolved, no_sources)


def _json_view(resolved: Any) -> dict[str, Any]:
    data = dataclasses.asdict(resolved.spec)
    sources = {path: resolved.composed.source_of(path) for path in _leaf_paths(data, "")}
    return {"config": data, "sources": sources, "layout": dataclasses.asdict(resolved.layout)}


def _show_one(resolved: Any, no_sources: bool) -> None:
    data = dataclasses.asdict(resolved.spec)
    click.echo("# layers, later wins: default (schema)")
    for line in resolved.composed.layer_lines():
        click.echo(f"#   {line}")
    lines = _yaml_lines(data, "", 0, resolved.composed.source_of, not no_sources)
    click.echo("\n".join(lines))
    click.echo(f"# layout: {resolved.layout.instances} server instance(s), "
               f"{resolved.layout.gpus_per_instance} GPU(s) each, "
               f"{resolved.layout.nodes_per_instance} node(s) per instance")
    for name, place in resolved.auxiliary.items():
        where = (f"GPUs {place.gpu_offset}+ of node 0" if place.first_node == 0
                 else f"from node {place.first_node} of the job")
        click.echo(f"# auxiliary_deployments.{name}: {place.layout.instances} server "
                   f"instance(s), {place.layout.gpus_per_instance} GPU(s) each, {where}")


def _leaf_paths(data: Any, prefix: str) -> list[str]:
    if isinstance(data, dict) and data:
        out: list[str] = []
        for k, v in data.items():
            out += _leaf_paths(v, f"{prefix}.{k}" if prefix else k)
        return out
    return [prefix]


def _scalar(value: Any) -> str:
    import yaml

    text: str = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _yaml_lines(data: dict[str, Any], prefix: str, depth: int, source_of: Any,
                with_sources: bool) -> list[str]:
    lines: list[str] = []
    pad = "  " * depth
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:")
            lines += _yaml_lines(value, path, depth + 1, source_of, with_sources)
            continue
        if key == "tasks" and isinstance(value, list):
            lines.append(f"{pad}{key}:" + (f"  # {source_of(path)}" if with_sources else ""))
            for task in value:
                lines.append(f"{pad}  - name: {_scalar(task['name'])}")
                rest = {k: v for k, v in task.items() if k != "name"}
                lines += _yaml_lines(rest, f"{path}.{task['name']}", depth + 2, source_of,
                                     with_sources)
            continue
        line = f"{pad}{key}: {_scalar(value)}"
        if with_sources:
            line = f"{line:<60} # {source_of(path)}"
        lines.append(line)
    return lines
