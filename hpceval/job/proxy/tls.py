"""TLS for a sweep judge's front (shared-cluster-4 N1).

A sweep's judge is a job of its own, reached by the elements' proxies over the cluster network:
a port number proves nothing once the judge has died (another uid bound its port and received
every judge request with the token). The judge job therefore makes a key pair of its own (in a
0700 folder) and serves its instances through an hpceval proxy with TLS on it; endpoint.json
carries the certificate's SHA-256 and the elements' proxies pin it (proxy.client, proxy.sessions):
a process without the key cannot complete the handshake, and nothing is sent before it.
"""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(tls: tuple[Path, Path] | None) -> ssl.SSLContext | None:
    """The server side of https for (certificate, key); None: plain http."""
    if tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tls[0]), str(tls[1]))
    return context

