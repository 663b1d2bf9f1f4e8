"""THE reader of a sweep judge's record: ``auxiliary/<name>/endpoint.json`` and ``token``.

The sweep's judge job (scope: sweep) writes ``token`` (0600) and then ``endpoint.json``, each
renamed into place, once every judge instance is healthy; a successor judge job (the first one
reached its walltime) writes new ones. Two readers need them: the element's job script, once,
before it starts the judge's proxy (``python -m hpceval.job judge-endpoint DIR`` prints the URLs),
and that proxy, again, when the judge it uses is gone (hpceval.job.proxy.judge_successor). Both go
through `read_endpoint`, so what is trusted is decided here only.

A record is trusted only as this user's own plain files: not links, owned by the user, not
writable by group or others, and the token readable by its owner only. Another user who can
write the folder (shared scratch) could otherwise plant a record that sends the job's
requests, and the judge's token, to a server of theirs. The rule and the reading are
hpceval.trust's (read_trusted: each file opened without following a link and checked through
the open descriptor, so what is read is what was checked), with the name itself never a link,
the token private, and the folders above not judged: a run directory may sit in a project
folder its group can write, and what is trusted here is the two files themselves.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE
from hpceval.contract import AUX_TLS_KEY as TLS_KEY
from hpceval.trust import Untrusted, read_trusted

MAX_URLS = 64
MAX_BYTES = 64 << 10  # a record of 64 URLs is a few KB; a huge file is not a record
URL = re.compile(r"https?://[A-Za-z0-9._-]+:[0-9]+")
SHA256 = re.compile(r"[0-9a-f]{64}")


class EndpointMissing(Exception):
    """No complete record yet (the judge is loading, or between two judge jobs)."""


class EndpointUntrusted(Exception):
    """A record is there but may not be used: not this user's own plain files, or malformed."""


@dataclass(frozen=True)
class JudgeEndpoint:
    urls: tuple[str, ...]
    job_id: str
    token: str = field(repr=False)  # never printed: the judge's servers accept it
    # the SHA-256 of the certificate the judge's front presents (its https URLs): the proxy
    # sends nothing, token included, to a server that does not present it
    pin: bytes | None = None


def read_endpoint(folder: Path) -> JudgeEndpoint:
    """The record in `folder`; EndpointMissing while there is none, EndpointUntrusted (its
    message says why) when it may not be used."""
    token = _read_own(folder / AUX_TOKEN_FILE, owner_only=True).strip()
    raw = _read_own(folder / AUX_ENDPOINT_FILE, owner_only=False)
    where = folder / AUX_ENDPOINT_FILE
    if not token:
        raise EndpointUntrusted(f"{folder / AUX_TOKEN_FILE} is empty")
    try:
        record = json.loads(raw)
        urls = record["urls"]
        job_id = str(record.get("job_id", ""))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EndpointUntrusted(f"{where} is not a judge's record ({exc})") from None
    if not isinstance(urls, list) or not urls:
        raise EndpointUntrusted(f"{where} names no instance URL")
    bad = [u for u in urls if not isinstance(u, str) or not URL.fullmatch(u)]
    if bad:
        raise EndpointUntrusted(f"{where} holds a URL that is not http://host:port: {bad[0]!r}")
    pin = record.get(TLS_KEY)
    if pin is not None and not (isinstance(pin, str) and SHA256.fullmatch(pin)):
        raise EndpointUntrusted(f"{where}: {TLS_KEY} is not 64 hex digits")
    if pin is None and any(u.startswith("https:") for u in urls):
        raise EndpointUntrusted(f"{where} names https URLs without {TLS_KEY}: nothing to check "
                                "the judge's certificate against")
    return JudgeEndpoint(tuple(urls[:MAX_URLS]), job_id, token,
                         bytes.fromhex(pin) if pin is not None else None)


def _read_own(path: Path, owner_only: bool) -> str:
    try:
        data = read_trusted(path, limit=MAX_BYTES, private=owner_only, links=False,
                            folders=False)
    except Untrusted as exc:
        if exc.missing:
            raise EndpointMissing(f"{path} is not there yet") from None
        raise EndpointUntrusted(f"{exc.about(path)}: not trusted") from None
    if len(data) > MAX_BYTES:
        raise EndpointUntrusted(f"{path} is larger than {MAX_BYTES} bytes")
    return data.decode("utf-8", "replace")


def main(argv: Sequence[str]) -> int:
    """``python -m hpceval.job judge-endpoint DIR``: the record's URLs, one a line (exit 0);
    exit 3 while there is none, 2 (the reason on stderr) when it is not trusted. The token is
    not printed: the job script reads it from the file this call has just checked."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m hpceval.job judge-endpoint DIR", file=sys.stderr)
        return 2
    try:
        record = read_endpoint(Path(argv[0]))
    except EndpointMissing as exc:
        print(exc, file=sys.stderr)
        return 3
    except EndpointUntrusted as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(record.urls))
    return 0
