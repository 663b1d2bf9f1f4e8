"""container_runtime podman: docker's command line (runtimes/docker.py), daemonless; runs as
root or rootless. A sandbox's needs (``--runtime runc`` where crun cannot manage the cgroups,
no raised ulimits) are the profile's ``execution.container_options``."""

from __future__ import annotations

from hpceval.runtimes import register
from hpceval.runtimes.docker import Docker


@register
class Podman(Docker):
    name = "podman"
    order = 5
    summary = "podman (docker's command line)"
    tool_name = "podman"
