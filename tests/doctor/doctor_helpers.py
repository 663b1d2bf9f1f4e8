"""What the doctor's tests share: a fake sinfo, a mount table with NFS, a strict Slurm client,
a run spec and a node job's facts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpceval.backends.slurm.client import SlurmError
from hpceval.backends.slurm.records import QueueEntry
from hpceval.config.schema import RunSpec
from hpceval.doctor import node
from hpceval.doctor.report import Line

SINFO = r'''#!/bin/bash
echo "$*" >> "$(dirname "$0")/calls"
[ "$1 $2 $3" = "-h -o %P %l" ] || { echo "unexpected arguments: $*" >&2; exit 2; }
table='gpu* 12:00:00
debug infinite'
# like Slurm: an unknown partition is no line and exit 0
if [ "${4:-}" = -p ]; then grep "^$5[* ]" <<< "$table" || true; else echo "$table"; fi
'''
NFS = "srv:/home /home nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n"


class FakeClient:
    """A strict SlurmClient with test_only: records every call, answers as told."""

    def __init__(self, *, refuse: str | None = None, facts: dict[str, Any] | None = None,
                 state: str = "COMPLETED") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refuse, self.facts, self.state = refuse, facts, state
        self.test_only_script = ""

    def test_only(self, script_path: Path, *, extra_args: Sequence[str] = ()) -> str:
        assert script_path.is_file(), "sbatch --test-only reads a script that exists"
        self.calls.append(("test_only", list(extra_args)))
        self.test_only_script = script_path.read_text()
        if self.refuse:
            raise SlurmError(["sbatch", "--test-only"], 1, self.refuse)
        return "sbatch: Job 7 to start at 2026-01-01T00:00:00 using 1 processors"

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
        self.calls.append(("submit", list(extra_args)))
        if self.facts is not None:  # "the job ran": its report where the script says
            report = script_path.parent / node.REPORT_FILE
            report.write_text(json.dumps({"version": 1, "facts": self.facts}))
        return "42"

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
        self.calls.append(("squeue", list(job_ids)))
        return {}

    def sacct(self, job_ids: Sequence[str], *, starttime: Any = None) -> dict[str, Any]:
        raise AssertionError("the doctor does not need sacct")

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.calls.append(("cancel", list(job_ids)))


def spec_for(tmp_path: Path, **execution: Any) -> RunSpec:
    from hpceval.config.build import build_run_spec

    if "output_dir" not in execution:  # doctor makes no folder: one that exists, as a site's
        (tmp_path / "out").mkdir(exist_ok=True)
    ex = {"partition": "gpu", "walltime": "01:00:00", "output_dir": str(tmp_path / "out"),
          **execution}
    return build_run_spec({"execution": ex, "deployment": {"type": "none"},
                           "evaluation": {"tasks": [{"name": "t"}]}})


def by_check(lines: list[Line]) -> dict[str, Line]:
    return {line.check: line for line in lines}


def node_facts(**changes: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "node": {"rc": 0, "out": "node1 x86_64"}, "hpceval": {"rc": 0, "out": "0.1.0 x86_64"},
        "apptainer": {"rc": 0, "out": "apptainer version 1.3.4"},
        "singularity": {"rc": 127, "out": "not on PATH"},
        "enroot": {"rc": 127, "out": "not on PATH"}, "podman": {"rc": 127, "out": "not on PATH"},
        "gpus": {"rc": 0, "out": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"},
        "route": {"rc": 0, "out": "default via 10.0.0.1 dev eth0"},
        "listening": {"rc": 0, "out": "22 8000 8001"},
        "node_addr": {"rc": 0, "out": "node1 10.0.0.11"},
        "addresses": {"rc": 0, "out": "1: lo    inet 127.0.0.1/8 scope host lo\n"
                                      "2: eth0    inet 10.0.0.11/24 brd 10.0.0.255 scope global"
                                      " eth0\n3: ib0    inet 10.1.0.11/16 scope global ib0"},
        "flock": {"rc": 0, "out": ""},
        "space": {"rc": 0, "out": "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
                                  "tmpfs 104857600 0 104857600 0% /tmp\n"
                                  "srv:/scratch 1073741824 0 536870912 50% /scratch"},
        "preempt": {"rc": 0, "out": "PartitionName=gpu\n   PreemptMode=REQUEUE State=UP"},
        "submit": {"rc": 0, "out": "sbatch: Job 9 to start at 2026-01-01T00:00:00"},
        "port_range": {"rc": 0, "out": "32768 60999"}}
    facts.update(changes)
    return facts


def address_facts(nccl: str, addresses: str | None = None) -> dict[str, Any]:
    """The doctor's nccl_choice and nccl_note facts for NCCL_SOCKET_IFNAME=NCCL, from the servers'
    own address code (node_address_code) run in bash on a node whose `ip -4 -o addr show` prints
    ADDRESSES (node_facts' by default), as the node job runs it."""
    import subprocess
    import tempfile
    from pathlib import Path

    from hpceval.render.quoting import node_address_code

    out = node_facts()["addresses"]["out"] if addresses is None else addresses
    with tempfile.TemporaryDirectory() as folder:
        ip = Path(folder) / "ip"
        ip.write_text(f"#!/bin/bash\n[ \"$*\" = '-4 -o addr show' ] || exit 2\ncat <<'EOF'\n"
                      f"{out}\nEOF\n")
        ip.chmod(0o755)
        code = (f"node=node1\n{{\n{node_address_code()}}} 2> {folder}/note\n"
                f'echo "${{dev:--}} ${{addr:--}}"; cat {folder}/note')
        done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                              check=True, env={"PATH": f"{folder}:/usr/bin:/bin",
                                               "NCCL_SOCKET_IFNAME": nccl})
    choice, _, note = done.stdout.partition("\n")
    return {"nccl_choice": {"rc": 0, "out": choice}, "nccl_note": {"rc": 0, "out": note}}
