"""Response cache on shared storage (NFS, Lustre, GPFS): append-only shards, no SQLite, no locks.

Why this shape: SQLite and `flock` are unreliable on network file systems, and several proxies
(array tasks, requeued jobs on other nodes) may share a cache directory. So every proxy process
appends to its *own* shard file and only ever reads the others; nothing is rewritten in place.

Key
    `sha256` of canonical JSON (sorted keys, compact separators, UTF-8) of `[path, body]`, where
    `body` is the request *after* the request interceptors (a new system prompt or changed params
    change what the model sees, so they must change the key) and without the fields in
    `IGNORED_FIELDS`, which do not change the output: `stream`/`stream_options` (only non-streamed
    requests are cached, so `"stream": false` and no `stream` must match), `user`, `request_id`
    and `priority` (bookkeeping and scheduling). Everything else counts, including fields this
    code does not know: an unknown parameter may change the output, a missed hit only costs a
    request. `0` and `0.0` are different keys; one harness sends the same spelling on resume.

    Repeated identical *sampled* requests (temperature absent or > 0) are distinct samples, e.g.
    pass@k done by sending one prompt k times. Answering all k from the first answer would
    silently corrupt the metric, so the k-th identical sampled request of a process gets key
    `sha256(base_key + k)`; a resumed run replays 1st, 2nd, ... occurrence from the cache in the
    same way. Greedy requests (temperature 0) and embeddings always use the base key.

Shard format (`<cache-dir>/shard-<host>-<pid>-<ts>.jsonl`), one line per response:
    {"k":"<64 hex key>","s":<status>,"t":<unix time>,"p":"<path>","r":<response JSON, verbatim>}
    The fixed prefix lets the start-up scan index a line without parsing the body; a hit reads
    the line back with one `pread` and checks the key, the suffix and that the body parses, so a
    torn or corrupted line is a miss, never a wrong answer. Lines are written with one `write`
    on an O_APPEND descriptor and fsync'd in batches, at SIGUSR1/SIGTERM and at close.
    Reads happen on the event loop: the start-up scan has just pulled the shards into the page
    cache, and a thread hand-off per hit would cost more than the read.

Only 2xx, non-error JSON answers of `CACHED_PATHS` are stored; streamed answers are passed
through and never cached (their bytes go to the client as they arrive).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
IGNORED_FIELDS = frozenset({"stream", "stream_options", "user", "request_id", "priority"})
SHARD_GLOB = "shard-*.jsonl"
_PREFIX = b'{"k":"'
_KEY_END = len(_PREFIX) + 64
_BODY_MARK = b',"r":'
# Index values pack (shard number, offset, length) into one int: ~3x less memory than a tuple.
_LEN_BITS, _OFF_BITS = 32, 48


def request_key(path: str, body: dict[str, Any]) -> bytes:
    canon = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    text = json.dumps([path, canon], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).digest()


def is_sampled(path: str, body: dict[str, Any]) -> bool:
    if path == "/v1/embeddings":
        return False
    temperature = body.get("temperature")
    return not isinstance(temperature, (int, float)) or temperature > 0


def _shard_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for every line of a shard; the last one may be torn (no newline)."""
    offset = 0
    with path.open("rb") as f:
        for line in f:
            yield offset, line
            offset += len(line)


def _line_key(line: bytes) -> bytes | None:
    """The key of a well-formed line, or None for a torn or foreign one."""
    if len(line) <= _KEY_END or line[_KEY_END] != ord('"') or not (
            line.startswith(_PREFIX) and line.endswith(b"}\n")):
        return None
    try:
        return bytes.fromhex(line[len(_PREFIX):_KEY_END].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None


class ResponseCache:
    """Index of all shards in `cache_dir` plus this process's own shard (created on first put)."""

    def __init__(self, cache_dir: Path, fsync_every: int = 256) -> None:
        self.dir = cache_dir
        self.fsync_every = fsync_every
        self.dir.mkdir(parents=True, exist_ok=True)
        self._index: dict[bytes, int] = {}
        self._fds: list[int] = []  # read descriptors, by shard number
        self._seen: dict[bytes, int] = {}  # occurrences of sampled requests in this process
        self._own_fd: int | None = None
        self._own_no = -1
        self._own_size = 0
        self._unsynced = 0
        self._syncing = False
        self._flush_task: asyncio.Task[None] | None = None
        self.loaded_entries = 0
        self.torn_lines = 0
        self.corrupt_hits = 0
        self.write_error: str | None = None
        self._load()

    def __len__(self) -> int:
        return len(self._index)

    def key_for(self, path: str, body: dict[str, Any]) -> bytes:
        key = request_key(path, body)
        if is_sampled(path, body):
            nth = self._seen.get(key, 0)
            self._seen[key] = nth + 1
            if nth:
                key = hashlib.sha256(key + nth.to_bytes(8, "little")).digest()
        return key

    def get(self, key: bytes) -> bytes | None:
        """The cached response body, or None (a miss, or a line that fails its checks)."""
        loc = self._index.get(key)
        if loc is None:
            return None
        length = loc & ((1 << _LEN_BITS) - 1)
        offset = (loc >> _LEN_BITS) & ((1 << _OFF_BITS) - 1)
        try:
            line = os.pread(self._fds[loc >> (_LEN_BITS + _OFF_BITS)], length, offset)
            if len(line) != length or _line_key(line) != key:
                raise ValueError("key mismatch")
            body = line[line.index(_BODY_MARK, _KEY_END) + len(_BODY_MARK):-2]
            json.loads(body)
        except (OSError, ValueError) as exc:
            self.corrupt_hits += 1
            del self._index[key]
            log.warning("cache entry %s unreadable (%s): treated as a miss", key.hex()[:12], exc)
            return None
        return body

    def put(self, key: bytes, path: str, status: int, body: bytes) -> None:
        """Append one response. `body` must be compact JSON (no newline). Never raises."""
        if self.write_error is not None:
            return
        line = b"".join((_PREFIX, key.hex().encode(), b'","s":', str(status).encode(),
                         b',"t":', b"%.3f" % time.time(), b',"p":', json.dumps(path).encode(),
                         _BODY_MARK, body, b"}\n"))
        try:
            fd = self._own_fd if self._own_fd is not None else self._open_own()
            view = memoryview(line)
            while view:  # a regular-file write is short only on errors; loop to be sure
                view = view[os.write(fd, view):]
        except OSError as exc:
            # A full or failing file system must not fail evaluation requests: stop caching.
            self.write_error = f"{type(exc).__name__}: {exc}"
            log.error("cache writes disabled: %s", self.write_error)
            return
        self._index[key] = ((self._own_no << _OFF_BITS | self._own_size) << _LEN_BITS) | len(line)
        self._own_size += len(line)
        self._unsynced += 1
        if self._unsynced >= self.fsync_every and self._flush_task is None:
            try:
                task = asyncio.get_running_loop().create_task(self.flush())
            except RuntimeError:  # no loop (offline use): close() fsyncs
                return
            self._flush_task = task  # a reference, so the task is not collected mid-flight
            task.add_done_callback(self._flush_done)

    def _flush_done(self, _task: asyncio.Task[None]) -> None:
        self._flush_task = None

    async def flush(self) -> None:
        """fsync the own shard in a thread: on NFS it is a server round trip, not loop work."""
        if self._own_fd is None or not self._unsynced or self._syncing:
            return
        self._syncing, pending = True, self._unsynced
        try:
            await asyncio.to_thread(os.fsync, self._own_fd)
            self._unsynced -= pending
        except OSError as exc:
            log.error("cache fsync failed: %s", exc)
        finally:
            self._syncing = False

    def close(self) -> None:
        if self._own_fd is not None:
            try:
                os.fsync(self._own_fd)
            except OSError as exc:
                log.error("cache fsync at close failed: %s", exc)
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        self._own_fd = None

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._index), "loaded": self.loaded_entries,
                "torn_lines": self.torn_lines, "corrupt_hits": self.corrupt_hits,
                "shards_open": len(self._fds), "write_error": self.write_error}

    def _load(self) -> None:
        for path in sorted(self.dir.glob(SHARD_GLOB)):
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as exc:  # an unreadable shard costs its entries, not the job
                log.error("skipping cache shard %s: %s", path, exc)
                continue
            no, found = len(self._fds), 0
            self._fds.append(fd)
            try:
                for offset, line in _shard_lines(path):
                    key = _line_key(line)
                    if key is None:
                        self.torn_lines += 1
                        continue
                    self._index[key] = ((no << _OFF_BITS | offset) << _LEN_BITS) | len(line)
                    found += 1
            except OSError as exc:  # the lines indexed so far are still readable through fd
                log.error("cache shard %s unreadable after %d entries: %s", path, found, exc)
            if not found:
                os.close(self._fds.pop())
            self.loaded_entries += found
        if self.torn_lines:
            log.warning("cache: ignored %d torn or malformed shard lines", self.torn_lines)

    def _open_own(self) -> int:
        # O_EXCL: offsets are counted from 0, so never append to a shard that already exists.
        name = f"shard-{_stamp()}.jsonl"
        fd = os.open(self.dir / name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        self._own_fd, self._own_no = fd, len(self._fds)
        self._fds.append(fd)
        return fd


def compact(cache_dir: Path) -> dict[str, Any]:
    """Merge all shards into one (after the job: a shard being written must not be compacted).

    Keeps the first valid line of each key, drops torn lines, writes a temp file, fsyncs it and
    `os.replace`s it into place before deleting the merged shards, so a crash at any point leaves
    every entry readable (at worst twice, which the loader tolerates).
    """
    shards = sorted(cache_dir.glob(SHARD_GLOB))
    stamp = _stamp()
    tmp = cache_dir / f".compact-{stamp}.tmp"
    seen: set[bytes] = set()
    torn = 0
    with tmp.open("wb") as out:
        for shard in shards:
            for _, line in _shard_lines(shard):
                key = _line_key(line)
                if key is not None and key in seen:
                    continue
                if key is None or not _parses(line):
                    torn += 1
                    continue
                seen.add(key)
                out.write(line)
        out.flush()
        os.fsync(out.fileno())
    target = cache_dir / f"shard-compacted-{stamp}.jsonl"
    os.replace(tmp, target)
    _fsync_dir(cache_dir)
    for shard in shards:
        if shard != target:
            shard.unlink()
    return {"path": str(target), "entries": len(seen), "shards_merged": len(shards),
            "dropped_lines": torn}


def _stamp() -> str:
    """<host>-<pid>-<UTC time to the microsecond>: unique per process and instance."""
    now = time.time()
    micros = int(now * 1e6) % 1_000_000
    return f"{socket.gethostname()}-{os.getpid()}-" \
           f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{micros:06d}"


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _fsync_dir(path: Path) -> None:
    # Makes the rename durable on local file systems; some network file systems refuse it.
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
