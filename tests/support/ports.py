"""A free TCP port for a test's own listener.

The kernel's pick (bind to port 0) comes from the ephemeral range (32768 and up): never a port
a job of the dev cluster takes (jobs take blocks from 8000 up to 32767, by job id), so a test
running beside other people's jobs does not collide with them.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
