"""The response cache on its own: keys, shards, torn lines, corruption, compaction."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from hpceval.job.cache import ResponseCache, request_key
from hpceval.job.cache_compact import compact

CHAT = "/v1/chat/completions"


def body(content: str = "hi", **params: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **params}


def answer(n: int) -> bytes:
    return json.dumps({"id": f"c{n}", "choices": [{"message": {"content": f"a{n}"}}]},
                      separators=(",", ":")).encode()


def fill(cache_dir: Path, count: int, start: int = 0) -> list[bytes]:
    cache = ResponseCache(cache_dir)
    keys = []
    for n in range(start, start + count):
        key = cache.key_for(CHAT, body(f"q{n}", temperature=0))
        cache.put(key, CHAT, 200, answer(n))
        keys.append(key)
    cache.close()
    return keys


def test_key_ignores_bookkeeping_fields_only() -> None:
    base = request_key(CHAT, body(temperature=0))
    assert request_key(CHAT, body(temperature=0, stream=False, user="u", request_id="r")) == base
    assert request_key(CHAT, {"temperature": 0, **body()}) == base  # key order does not matter
    assert request_key(CHAT, body(temperature=0.5)) != base
    assert request_key(CHAT, body(temperature=0, seed=1)) != base
    assert request_key(CHAT, body(temperature=0, some_new_param=1)) != base
    assert request_key("/v1/completions", body(temperature=0)) != base
    assert request_key(CHAT, body("other", temperature=0)) != base


def test_sampled_repeats_get_distinct_keys_greedy_repeats_do_not(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    sampled = [cache.key_for(CHAT, body(temperature=0.7)) for _ in range(3)]
    default_temperature = [cache.key_for(CHAT, body()) for _ in range(2)]
    greedy = [cache.key_for(CHAT, body(temperature=0)) for _ in range(3)]
    embeddings = [cache.key_for("/v1/embeddings", {"model": "m", "input": "x"}) for _ in range(2)]
    assert len(set(sampled)) == 3 and len(set(default_temperature)) == 2
    assert len(set(greedy)) == 1 and len(set(embeddings)) == 1
    cache.close()


def test_round_trip_and_reload_in_new_instance(tmp_path: Path) -> None:
    keys = fill(tmp_path, 5)
    shards = list(tmp_path.glob("shard-*.jsonl"))
    assert len(shards) == 1 and shards[0].name.startswith("shard-")
    lines = shards[0].read_bytes().splitlines()
    assert all(json.loads(line)["s"] == 200 for line in lines)  # each line is plain JSON
    cache = ResponseCache(tmp_path)
    assert cache.loaded_entries == 5
    assert [cache.get(k) for k in keys] == [answer(n) for n in range(5)]
    assert cache.get(b"\0" * 32) is None
    cache.close()


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    keys = fill(tmp_path, 3)
    shard = next(tmp_path.glob("shard-*.jsonl"))
    data = shard.read_bytes()
    shard.write_bytes(data[:-10])  # the process died in the middle of writing the last line
    (tmp_path / "shard-other-1-x.jsonl").write_bytes(
        b"\0" * 100 + b"\n" + b'{"k":"ab}\n' + b'{"k":"zz')
    cache = ResponseCache(tmp_path)
    assert cache.loaded_entries == 2 and cache.torn_lines == 4
    assert cache.stats()["shards_open"] == 1  # the shard with nothing usable is not kept open
    assert cache.get(keys[0]) == answer(0) and cache.get(keys[2]) is None
    cache.close()


def test_corrupted_entry_is_a_miss_not_a_wrong_answer(tmp_path: Path) -> None:
    keys = fill(tmp_path, 2)
    shard = next(tmp_path.glob("shard-*.jsonl"))
    data = bytearray(shard.read_bytes())
    first_end = data.index(b"\n")
    data[first_end - 5] = 0  # a zeroed byte inside the first body, framing intact
    shard.write_bytes(bytes(data))
    cache = ResponseCache(tmp_path)
    assert cache.get(keys[0]) is None and cache.corrupt_hits == 1
    assert cache.get(keys[1]) == answer(1)
    cache.close()


def test_write_failure_disables_cache_without_raising(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ResponseCache(tmp_path)
    cache.put(cache.key_for(CHAT, body(temperature=0)), CHAT, 200, answer(0))

    def full_disk(_fd: int, _data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("hpceval.job.cache.os.write", full_disk)
    key = cache.key_for(CHAT, body("x", temperature=0))
    cache.put(key, CHAT, 200, answer(1))
    assert cache.write_error is not None and "No space left" in cache.write_error
    assert cache.get(key) is None and len(cache) == 1
    cache.close()


def test_compaction_merges_and_preserves_entries(tmp_path: Path) -> None:
    keys = fill(tmp_path, 4) + fill(tmp_path, 3, start=10)
    dup = fill(tmp_path, 1)  # the same request answered again by a later job
    shard = sorted(tmp_path.glob("shard-*.jsonl"))[0]
    with shard.open("ab") as f:
        f.write(b'{"k":"torn')
    stats = compact(tmp_path)
    shards = list(tmp_path.glob("shard-*.jsonl"))
    assert len(shards) == 1 and str(shards[0]) == stats["path"]
    assert stats["entries"] == 7 and stats["shards_merged"] == 3 and stats["dropped_lines"] == 1
    assert not list(tmp_path.glob(".compact-*"))
    cache = ResponseCache(tmp_path)
    assert cache.loaded_entries == 7 and cache.torn_lines == 0
    assert cache.get(dup[0]) == answer(0)
    assert [cache.get(k) for k in keys] == [answer(n) for n in (0, 1, 2, 3, 10, 11, 12)]
    cache.close()


def test_index_costs_12_bytes_per_entry_and_keeps_keys_sharing_its_slice(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    twins = [b"\x07" * 10 + bytes([n]) * 22 for n in (1, 2)]  # equal in the 8+32 indexed bits
    for n, key in enumerate(twins):
        cache.put(key, CHAT, 200, answer(n))
    for n in range(2, 5002):
        cache.put(cache.key_for(CHAT, body(f"q{n}", temperature=0)), CHAT, 200, answer(n))
    assert [cache.get(k) for k in twins] == [answer(0), answer(1)]
    assert cache.get(b"\x07" * 10 + b"\x03" * 22) is None  # same slice, not stored: a miss
    assert cache.stats()["index_bytes"] == 5002 * 12
    cache.close()
    cache = ResponseCache(tmp_path)
    assert [cache.get(k) for k in twins] == [answer(0), answer(1)] and len(cache) == 5002
    cache.close()


def test_long_answers_and_lines_without_crc_are_read_back(tmp_path: Path) -> None:
    long_answer = json.dumps({"choices": [{"text": "x" * 100_000}]}).encode()
    old_key = bytes(range(32))
    old_line = b'{"k":"' + old_key.hex().encode() + b'","s":200,"t":1.0,"p":"' + CHAT.encode() \
        + b'","r":' + answer(7) + b"}\n"  # as written before lines carried a CRC
    (tmp_path / "shard-old-1-x.jsonl").write_bytes(old_line)
    cache = ResponseCache(tmp_path)
    key = cache.key_for(CHAT, body(temperature=0))
    cache.put(key, CHAT, 200, long_answer)
    assert cache.get(key) == long_answer and cache.get(old_key) == answer(7)
    cache.close()


def test_lease_held_while_open(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    leases = list(tmp_path.glob("live-*"))
    assert len(leases) == 1 and json.loads(leases[0].read_text())["pid"] == os.getpid()
    cache.close()
    assert not list(tmp_path.glob("live-*"))


def test_a_lease_names_the_job_by_its_neutral_id(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease records the id the backend's env.j2 exports (HPCEVAL_JOB_ID), never a
    scheduler's own variable: compaction asks the backend whether that job still runs."""
    monkeypatch.setenv("HPCEVAL_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    cache = ResponseCache(tmp_path)
    (lease,) = tmp_path.glob("live-*")
    assert json.loads(lease.read_text())["job"] == "4242"
    cache.close()
    monkeypatch.setenv("HPCEVAL_JOB_ID", "")  # the local backend's env.j2: no job id
    cache = ResponseCache(tmp_path)
    (lease,) = tmp_path.glob("live-*")
    assert json.loads(lease.read_text())["job"] is None
    cache.close()


def test_a_stored_answer_that_is_not_usable_is_never_replayed(tmp_path: Path) -> None:
    """Lines written before answers were checked at store time: intact (CRC), but truncated,
    an error, or without choices. A hit on one is a miss; compaction drops it and keeps a
    later usable answer to the same request."""
    cache = ResponseCache(tmp_path)
    bad = {b"\x01" * 32: b'{"choices":[{"text":"cut off}',
           b"\x02" * 32: b'{"\\u0065rror":{"message":"x"}}',
           b"\x03" * 32: b'{"choices":[]}'}
    for key, body in bad.items():
        cache.put(key, CHAT, 200, body)
    cache.put(b"\x04" * 32, "/v1/embeddings", 200, b'{"data":[{"embedding":[1]}]}')
    assert all(cache.get(key, CHAT) is None for key in bad)
    assert cache.get(b"\x04" * 32, "/v1/embeddings") is not None
    assert cache.get(b"\x04" * 32, CHAT) is None  # a chat answer needs choices
    cache.close()
    later = ResponseCache(tmp_path)
    later.put(b"\x01" * 32, CHAT, 200, answer(1))  # the request answered again, properly
    later.close()
    stats = compact(tmp_path)
    assert stats["entries"] == 2 and stats["dropped_lines"] == 3
    merged = ResponseCache(tmp_path)
    assert merged.get(b"\x01" * 32, CHAT) == answer(1)
    merged.close()
