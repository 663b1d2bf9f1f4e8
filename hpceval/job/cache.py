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
    When the task's interceptor chain changes requests, its request stage (`request_chain`, as
    JSON) is a third element, `[path, body, chain]`: tasks whose chains differ never share an
    answer, even when their bodies come out the same (a task that sends a system prompt itself
    and one that gets it from its chain); tasks with the same chain, or none, do.

    Repeated identical *sampled* requests (temperature absent or > 0) are distinct samples, e.g.
    pass@k done by sending one prompt k times. Answering all k from the first answer would
    silently corrupt the metric, so the k-th identical sampled request of a process gets key
    `sha256(base_key + k)`; a resumed run replays 1st, 2nd, ... occurrence from the cache in the
    same way. Greedy requests (temperature 0) and embeddings always use the base key.

Shard format (`<cache-dir>/shard-<host>-<pid>-<ts>.jsonl`), one line per response:
    {"k":"<64 hex key>","c":<crc32 of r>,"s":<status>,"t":<unix time>,"p":"<path>","r":<body>}
    `r` is the response JSON verbatim. The fixed prefix lets the start-up scan index a line
    without parsing the body; a hit reads the line back with `pread` and checks the key, the
    framing and the CRC, so a torn or corrupted line is a miss, never a wrong answer (lines
    without "c", from older versions, are checked by parsing the body instead). Lines are
    written with one `write` on an O_APPEND descriptor and fsync'd in batches, at
    SIGUSR1/SIGTERM and at close. Reads happen on the event loop: the start-up scan has just
    pulled the shards into the page cache, and a thread hand-off per hit costs more than a read.

Memory: the index keeps 12 bytes per entry (`cache_index.DigestMap`: a 32-bit slice of the key
and the line's shard and offset; the line's end is found by reading to its newline), so 100,000
new answers cost ~2 MiB of RSS, not the 14 MiB of a dict. Counters of sampled repeats likewise.

Leases: each process keeps `live-<host>-<pid>-<ts>` in the directory while it may read or write
shards (touched every minute, removed at close), so `cache_compact` never deletes a shard that
a running proxy is writing or reading; see there.

Only 2xx answers of `CACHED_PATHS` that parse as a JSON object with non-empty `choices`
(`data` for embeddings) and no error are stored (`usable_answer`), and a hit is checked the same
way before it is replayed, so a truncated or error answer written by an older version is a miss.
Streamed answers are passed through and never cached (their bytes go to the client as they
arrive).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpceval.job.cache_index import DigestMap
from hpceval.jobenv import JobEnv

log = logging.getLogger(__name__)

EMBEDDINGS = "/v1/embeddings"
CACHED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", EMBEDDINGS})
IGNORED_FIELDS = frozenset({"stream", "stream_options", "user", "request_id", "priority"})
SHARD_GLOB = "shard-*.jsonl"
LEASE_GLOB = "live-*"
LEASE_TOUCH_S = 60.0  # a lease untouched for LEASE_STALE_S belongs to a process that is gone
LEASE_STALE_S = 600.0  # generous: node clocks and NFS attribute caches disagree by seconds
_PREFIX = b'{"k":"'
_KEY_END = len(_PREFIX) + 64
_CRC_MARK = b',"c":'
_BODY_MARK = b',"r":'
_OFF_BITS = 48  # index values: shard number << 48 | offset (shards up to 256 TiB)
_OFF_MASK = (1 << _OFF_BITS) - 1
_FIRST_READ = 16384  # most answers fit; longer lines are read on in doubling chunks


def request_key(path: str, body: dict[str, Any], chain: str = "") -> bytes:
    canon = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    parts: list[Any] = [path, canon, chain] if chain else [path, canon]
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).digest()


def usable_answer(path: str | None, parsed: Any) -> bool:
    """Whether a parsed 2xx answer may be stored and replayed: an object with a non-empty
    `choices` list (`data` for embeddings; either when the path is unknown) and no error. The
    parsed object is checked, not the bytes: `{"\\u0065rror": ...}` is an error too."""
    if not isinstance(parsed, dict) or "error" in parsed or parsed.get("object") == "error":
        return False
    fields = ("data",) if path == EMBEDDINGS else ("choices",) if path else ("choices", "data")
    return any(isinstance(parsed.get(f), list) and parsed[f] for f in fields)


def storable(path: str, payload: bytes, parsed: Any) -> bytes | None:
    """The shard body for an answer (`parsed` is `payload` parsed, None if it did not parse), or
    None when it must not be cached. The shard is line-oriented: a pretty-printed answer is
    stored re-serialized."""
    if not usable_answer(path, parsed):
        return None
    return payload if b"\n" not in payload else json.dumps(
        parsed, ensure_ascii=False, separators=(",", ":")).encode()


def parse_answer(payload: bytes) -> Any:
    """The answer parsed, or None when it is not JSON (then it is passed on, never cached)."""
    try:
        return json.loads(payload)
    except ValueError:  # UnicodeDecodeError included
        return None


def is_sampled(path: str, body: dict[str, Any]) -> bool:
    if path == EMBEDDINGS:
        return False
    temperature = body.get("temperature")
    return not isinstance(temperature, (int, float)) or temperature > 0


def shard_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for every line of a shard; the last one may be torn (no newline)."""
    offset = 0
    with path.open("rb") as f:
        for line in f:
            yield offset, line
            offset += len(line)


def line_key(line: bytes) -> bytes | None:
    """The key of a well-framed line, or None for a torn or foreign one."""
    if len(line) <= _KEY_END or line[_KEY_END] != ord('"') or not (
            line.startswith(_PREFIX) and line.endswith(b"}\n")):
        return None
    try:
        return bytes.fromhex(line[len(_PREFIX):_KEY_END].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None


def line_body(line: bytes) -> bytes | None:
    """The response body of a well-framed line if it passes its integrity check, else None."""
    try:
        body = line[line.index(_BODY_MARK, _KEY_END) + len(_BODY_MARK):-2]
        if line.startswith(_CRC_MARK, _KEY_END + 1):
            start = _KEY_END + 1 + len(_CRC_MARK)
            crc = int(line[start:line.index(b",", start)])
            return body if zlib.crc32(body) == crc else None
        json.loads(body)  # a line written before the CRC field
    except ValueError:
        return None
    return body


def encode_line(key: bytes, path: str, status: int, body: bytes) -> bytes:
    return b"".join((_PREFIX, key.hex().encode(), b'"', _CRC_MARK, b"%d" % zlib.crc32(body),
                     b',"s":', b"%d" % status, b',"t":', b"%.3f" % time.time(), b',"p":',
                     json.dumps(path).encode(), _BODY_MARK, body, b"}\n"))


def read_line(fd: int, offset: int) -> bytes:
    """The line starting at `offset`, through its newline (without one if the file ends)."""
    chunk = os.pread(fd, _FIRST_READ, offset)
    end = chunk.find(b"\n")
    if end >= 0 or len(chunk) < _FIRST_READ:
        return chunk[:end + 1] if end >= 0 else chunk
    parts, size = [chunk], _FIRST_READ
    while True:
        offset, size = offset + len(chunk), size * 2
        chunk = os.pread(fd, size, offset)
        end = chunk.find(b"\n")
        if end >= 0:
            parts.append(chunk[:end + 1])
            return b"".join(parts)
        parts.append(chunk)
        if len(chunk) < size:
            return b"".join(parts)


class ResponseCache:
    """Index of all shards in `cache_dir` plus this process's own shard (created on first put)."""

    def __init__(self, cache_dir: Path, fsync_every: int = 256) -> None:
        self.dir = cache_dir
        self.fsync_every = fsync_every
        self.dir.mkdir(parents=True, exist_ok=True)
        self._stamp = stamp()
        self._index = DigestMap()  # key -> shard number << 48 | offset of its line
        self._fds: list[int] = []  # read descriptors, by shard number
        self._seen = DigestMap()  # occurrences of sampled requests in this process
        self._own_fd: int | None = None
        self._own_no = -1
        self._own_size = 0
        self._unsynced = 0
        self._syncing = False
        self._flush_task: asyncio.Task[None] | None = None
        self._lease = self.dir / f"live-{self._stamp}"
        self._lease_touched = 0.0
        self.loaded_entries = 0
        self.torn_lines = 0
        self.corrupt_hits = 0
        self.write_error: str | None = None
        self._take_lease()  # before the scan: a compaction starting now must see this process
        self._load()

    def __len__(self) -> int:
        return len(self._index)

    def key_for(self, path: str, body: dict[str, Any], base: bytes | None = None) -> bytes:
        """The key of this occurrence of a request; `base` is `request_key(path, body)` when
        the caller computed it already (off the event loop, for a large body)."""
        key = base if base is not None else request_key(path, body)
        if is_sampled(path, body):
            nth = self._seen.increment(key)
            if nth:
                key = hashlib.sha256(key + nth.to_bytes(8, "little")).digest()
        return key

    def get(self, key: bytes, path: str | None = None) -> bytes | None:
        """The cached response body, or None (a miss, or a line that fails its checks)."""
        for loc in list(self._index.candidates(key)):
            try:
                line = read_line(self._fds[loc >> _OFF_BITS], loc & _OFF_MASK)
            except OSError as exc:
                self._drop(key, loc, str(exc))
                continue
            found = line_key(line)
            if found is not None and found != key:
                continue  # another key sharing the index's slice of it: not an error
            body = line_body(line) if found is not None else None
            if body is None:
                self._drop(key, loc, "torn or corrupted line")
                continue
            if not usable_answer(path, parse_answer(body)):
                self._drop(key, loc, "stored answer is not a usable one")
                continue
            return body
        return None

    def _drop(self, key: bytes, loc: int, reason: str) -> None:
        self.corrupt_hits += 1
        self._index.discard(key, loc)
        log.warning("cache entry %s unreadable (%s): treated as a miss", key.hex()[:12], reason)

    def put(self, key: bytes, path: str, status: int, body: bytes) -> None:
        """Append one response. `body` must be compact JSON (no newline). Never raises."""
        if self.write_error is not None:
            return
        line = encode_line(key, path, status, body)
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
        self._index.add(key, self._own_no << _OFF_BITS | self._own_size)
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
        """fsync the own shard in a thread: on NFS it is a server round trip, not loop work.
        Also renews the lease when due (likewise a round trip)."""
        if time.monotonic() - self._lease_touched >= LEASE_TOUCH_S:
            self._lease_touched = time.monotonic()
            await asyncio.to_thread(self._touch_lease)
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

    async def flush_every(self, interval: float) -> None:
        """Forever (cancelled at shutdown, which closes the cache): flush every `interval` s."""
        while True:
            await asyncio.sleep(interval)
            await self.flush()

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
        self._lease.unlink(missing_ok=True)  # after the fsync: compaction may now merge it

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._index), "loaded": self.loaded_entries,
                "torn_lines": self.torn_lines, "corrupt_hits": self.corrupt_hits,
                "shards_open": len(self._fds), "write_error": self.write_error,
                "index_bytes": self._index.nbytes() + self._seen.nbytes()}

    def _take_lease(self) -> None:
        try:
            owner = {"host": socket.gethostname(), "pid": os.getpid(),
                     "job": JobEnv.read().job_id}
            self._lease.write_text(json.dumps(owner) + "\n")
            self._lease_touched = time.monotonic()
        except OSError as exc:  # a read-only cache still answers; compaction then may not wait
            log.error("could not write cache lease %s: %s", self._lease, exc)

    def _touch_lease(self) -> None:
        try:
            os.utime(self._lease)
        except FileNotFoundError:  # removed by hand or by a too eager compaction: take it again
            self._take_lease()
        except OSError as exc:
            log.warning("could not renew cache lease %s: %s", self._lease, exc)

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
                for offset, line in shard_lines(path):
                    key = line_key(line)
                    if key is None:
                        self.torn_lines += 1
                        continue
                    self._index.add(key, no << _OFF_BITS | offset)
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
        name = f"shard-{self._stamp}.jsonl"
        fd = os.open(self.dir / name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        self._own_fd, self._own_no = fd, len(self._fds)
        self._fds.append(fd)
        return fd


def stamp() -> str:
    """<host>-<pid>-<UTC time to the microsecond>: unique per process and instance."""
    now = time.time()
    micros = int(now * 1e6) % 1_000_000
    return f"{socket.gethostname()}-{os.getpid()}-" \
           f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{micros:06d}"
