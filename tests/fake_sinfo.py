"""A strict fake `sinfo` first on PATH, for the tests of what hpceval learns from it. Its script
records its arguments in `calls` beside it. Beside it is a `sacctmgr` that reaches no
accounting database, as on a site without slurmdbd (a test that needs its answers writes its
own fake over it), so no test asks the machine's real one, and an `scontrol` whose `show
config` enforces what the file `enforce` beside it holds (none when it is absent) and has the
MaxJobCount the file `max-job-count` holds (10000, Slurm's default, when absent) and the
PrivateData of `private-data` (none), and whose
`-o show partition P` gives P the QOS the file `partition-qos` names ("P QOS" lines). partitions and
accounts cache sinfo's, sacctmgr's and scontrol's answers per process, so the caches are cleared
before and after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpceval.backends.slurm.accounts import account_rows
from hpceval.backends.slurm.partitions import (
    associations,
    cluster_config,
    partition_info,
    partition_qos,
    qos_info,
    qos_max_minutes,
)

NO_ACCOUNTING = r'''#!/bin/bash
echo "sacctmgr: error: Sending PersistInit msg: Connection refused" >&2
exit 1
'''
SCONTROL = r'''#!/bin/bash
here=$(dirname "$0")
if [ "$#" = 4 ] && [ "$1 $2 $3" = "-o show partition" ]; then
  qos=$(awk -v p="$4" '$1 == p {print $2}' "$here/partition-qos" 2>/dev/null)
  echo "PartitionName=$4 AllowQos=ALL QoS=${qos:-N/A} State=UP"
  exit 0
fi
[ "$*" = "show config" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
echo "AccountingStorageEnforce = $(cat "$here/enforce" 2>/dev/null || echo none)"
echo "MaxArraySize            = 1001"
echo "MaxJobCount             = $(cat "$here/max-job-count" 2>/dev/null || echo 10000)"
echo "PrivateData             = $(cat "$here/private-data" 2>/dev/null || echo none)"
'''


def _clear() -> None:
    for cached in (partition_info, qos_info, qos_max_minutes, partition_qos, associations,
                   cluster_config, account_rows):
        cached.cache_clear()


@contextmanager
def fake_sinfo_on_path(bin_dir: Path, script: str,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`script` as `bin_dir/sinfo`, first on PATH; yields the path of its `calls` file."""
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("sinfo", script), ("sacctmgr", NO_ACCOUNTING), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    _clear()
    try:
        yield bin_dir / "calls"
    finally:
        _clear()


@contextmanager
def no_accounting_on_path(bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A `sacctmgr` that reaches no accounting database first on PATH (the machine's real one
    would answer for the dev cluster's users, QOS and grants), the answers cached before
    cleared; sinfo stays the machine's."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sacctmgr").write_text(NO_ACCOUNTING)
    (bin_dir / "sacctmgr").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    _clear()
    try:
        yield
    finally:
        _clear()
