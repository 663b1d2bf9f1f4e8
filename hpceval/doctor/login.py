"""The login-node half of ``hpceval doctor``: what can be checked before any job is queued.

Partition and MaxTime come from the one cached sinfo call of hpceval.backends.slurm.partitions,
the QOS's and the association's MaxWall from its cached sacctmgr calls, account/QOS from a
test-only submission through the Slurm client, staged images and data from
the submit preflight (hpceval.staging.preflight): the doctor adds no rule of its own there, it
only shows them as lines. Shared storage is judged by the mount table.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from hpceval.backends.slurm.client import SlurmClient, SlurmError
from hpceval.backends.slurm.commands import LIMITS, SUBMIT, TEST_ONLY
from hpceval.backends.slurm.formats import inputs_overridden
from hpceval.backends.slurm.header import HeaderLine, header_lines
from hpceval.backends.slurm.partitions import (
    association_limit,
    associations,
    job_association,
    job_place,
    partition_info,
    partition_qos,
    qos_max_minutes,
    user_name,
)
from hpceval.config import ResolvedConfig
from hpceval.config.schema import ExecutionSpec, RunSpec
from hpceval.doctor.report import Line, Status
from hpceval.durations import walltime_minutes
from hpceval.staging.preflight import preflight_all, preflight_notes
from hpceval.storage import within

# Filesystems that several machines mount (a login node and compute nodes see the same files).
SHARED_FS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "fuse.beegfs", "fhgfs", "cifs", "smb3", "ceph",
    "fuse.ceph", "fuse.cephfs", "wekafs", "panfs", "glusterfs", "fuse.glusterfs", "orangefs",
    "pvfs2", "fuse.sshfs", "virtiofs", "9p", "vast", "davfs"})
# In memory, or cleaned per job or per boot: never seen by another node, never kept.
NODE_LOCAL_FS = frozenset({"tmpfs", "ramfs", "devtmpfs"})
NODE_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")
LOGIN = "login"


class ProbingClient(SlurmClient, Protocol):
    """A Slurm client that can also ask whether a job would be accepted (test-only)."""

    def test_only(self, script_path: Path, *, extra_args: Sequence[str] = ()) -> str: ...


def site_args(ex: ExecutionSpec) -> list[str]:
    """The submission options that say where a job of this profile goes and who pays for it."""
    named = (("partition", ex.partition), ("account", ex.account), ("qos", ex.qos),
             ("reservation", ex.reservation))
    return [f"--{flag}={value}" for flag, value in named if value]


def partition_lines(ex: ExecutionSpec) -> list[Line]:
    lines: list[Line] = []
    for key, name in (("execution.partition", ex.partition),
                      ("execution.cpu_partition", ex.cpu_partition)):
        if key == "execution.cpu_partition" and (name is None or name == ex.partition):
            continue  # the CPU-only jobs go to the same partition: nothing more to ask
        label = name or "the default partition"
        info = partition_info(name)
        if info is None:
            lines.append(Line(LOGIN, key, Status.WARNING, f"{label}: sinfo could not be asked",
                              "run hpceval doctor where sinfo reaches the Slurm controller"))
        elif not info.found:
            lines.append(Line(LOGIN, key, Status.PROBLEM, f"{label}: no such partition",
                              f"set {key} to one of `sinfo -s`"))
        else:
            wanted = walltime_minutes(ex.walltime)
            limit = "unlimited" if info.max_minutes is None else f"{info.max_minutes} minutes"
            if key == "execution.partition" and info.max_minutes is not None and \
                    wanted is not None and wanted > info.max_minutes:
                lines.append(Line(LOGIN, key, Status.PROBLEM,
                                  f"{info.name}: MaxTime {limit}, execution.walltime "
                                  f"{ex.walltime} is longer ({SUBMIT} refuses it)",
                                  f"-o execution.walltime={info.max_minutes} or less"))
            else:
                lines.append(Line(LOGIN, key, Status.OK, f"{info.name}: MaxTime {limit}"
                                  f"{_own_qos(info.name)}"))
    if ex.qos:
        lines.append(_qos_line(ex, ex.qos))
    return lines


def _own_qos(partition: str | None) -> str:
    """The partition's own QOS for its line: its MaxWall caps every job there (submit checks
    it with the other limits, partitions.time_limit)."""
    own = partition_qos(partition) if partition else None
    if own is None:
        return ""
    wall = qos_max_minutes(own)
    return f"; its own QOS {own}" + (f" (MaxWall {wall} minutes)" if wall is not None else "")


def _qos_line(ex: ExecutionSpec, qos: str) -> Line:
    """The QOS's MaxWall, the usual way sites cap walltime (one sacctmgr call, cached)."""
    wall, wanted = qos_max_minutes(qos), walltime_minutes(ex.walltime)
    if wall is None:
        return Line(LOGIN, "execution.qos", Status.OK, f"{qos}: no MaxWall known")
    if wanted is not None and wanted > wall:
        return Line(LOGIN, "execution.qos", Status.PROBLEM, f"{qos}: MaxWall {wall} minutes, "
                    f"execution.walltime {ex.walltime} is longer", f"-o execution.walltime="
                    f"{wall} or less (auto-resume continues in a new allocation)")
    return Line(LOGIN, "execution.qos", Status.OK, f"{qos}: MaxWall {wall} minutes")


def association_line(ex: ExecutionSpec) -> Line:
    """The MaxWall of the user's association (user, account, partition; its accounts' where it
    sets none), the other usual way sites cap walltime (one sacctmgr call, cached). Slurm
    takes a MaxWall from the job's QOS first, then from the association: a QOS of the job
    that sets one is what counts then."""
    key, user = "execution.account", user_name()
    assoc = job_association(ex.partition, ex.account)
    if assoc is None:
        if user is None or associations(user, ex.account) is None:
            return Line(LOGIN, key, Status.OK, f"association: no MaxWall known ({LIMITS} "
                        "could not be asked: no accounting database here)")
        account = f"account {ex.account}" if ex.account else "your default account"
        return Line(LOGIN, key, Status.WARNING, f"{LIMITS} shows no single association of "
                    f"{user} with {account} for this partition", "check execution.account "
                    f"(`{LIMITS} show assoc user=$USER format=cluster,account,partition`)")
    wall, wanted = association_limit(assoc, named_qos=ex.qos is not None), \
        walltime_minutes(ex.walltime)
    qos_wall = qos_max_minutes(ex.qos) if ex.qos else None
    own = "no MaxWall" if assoc.max_minutes is None else f"MaxWall {assoc.max_minutes} minutes"
    if qos_wall is not None:
        return Line(LOGIN, key, Status.OK, f"{assoc.label}: {own}; QOS {ex.qos}'s MaxWall "
                    "counts instead")
    if wall is None:
        return Line(LOGIN, key, Status.OK, f"{assoc.label}: {own}")
    limit = f"{wall.what} is {wall.minutes} minutes"
    if wanted is not None and wanted > wall.minutes:
        return Line(LOGIN, key, Status.PROBLEM, f"{limit}, execution.walltime {ex.walltime} "
                    f"is longer ({SUBMIT} refuses the job or it pends for ever)",
                    f"-o execution.walltime="
                    f"{wall.minutes} or less (auto-resume continues in a new allocation)")
    return Line(LOGIN, key, Status.OK, limit)


def submit_environment_line(spec: RunSpec, environ: Mapping[str, str]) -> Line:
    """The submit shell's SBATCH_* variables: those for an option the job sets itself are
    left out at submit (formats.inputs_overridden, the client's one rule), the others apply."""
    check = "submit environment"
    found = sorted(name for name in environ if name.startswith("SBATCH_"))
    if not found:
        return Line(LOGIN, check, Status.OK, f"no SBATCH_* variable for {SUBMIT}")
    header = test_only_header(spec, Path(spec.execution.output_dir))
    left_out = inputs_overridden([line.flag for line in header], environ)
    applied = [f"{name}={environ[name]}" for name in found if name not in left_out]
    applies = f"{', '.join(applied)} applied (the job leaves those options unset)" \
        if applied else ""
    if not left_out:
        return Line(LOGIN, check, Status.OK, applies)
    return Line(LOGIN, check, Status.WARNING,
                f"{', '.join(f'{name}={environ[name]}' for name in left_out)} not applied: the "
                "job sets those options itself, as hpceval render shows"
                + (f"; {applies}" if applies else ""),
                "unset them, or leave the profile's key unset (null) to take the "
                "environment's value")


def test_only_line(spec: RunSpec, client: ProbingClient, folder: Path | None) -> Line:
    """The submit command's test-only run (TEST_ONLY) of the job's own header (partition,
    account, QOS, time, nodes, and the GPU, CPU and memory request), as render writes it for
    this spec: a trivial script with the partition alone passes where the job's GPU request
    is refused."""
    check = TEST_ONLY
    if folder is None:
        return Line(LOGIN, check, Status.WARNING, "not asked: no writable output dir for its "
                    "script", "fix execution.output_dir (above)")
    script = folder / "test-only.sh"
    lines = test_only_header(spec, folder)
    script.write_text("\n".join(["#!/bin/bash", *(line.text() for line in lines), "true", ""]),
                      encoding="utf-8")
    asked = " ".join(f"--{line.flag}" + ("" if line.value is None else f"={line.value}")
                     for line in lines if line.flag in _ASKED)
    try:
        answer = client.test_only(script)
    except SlurmError as exc:
        return Line(LOGIN, check, Status.PROBLEM, f"refused ({asked}): {exc.stderr or exc}",
                    "check execution.account, execution.qos and execution.reservation "
                    "(`sacctmgr show assoc user=$USER format=account,partition,qos`), and the "
                    "GPU request (execution.gpus_per_node, gpu_type, gpu_request)")
    finally:
        script.unlink(missing_ok=True)
    return Line(LOGIN, check, Status.OK, f"accepted ({asked}): {answer}")


# the header lines that say what a job asks for (not its name, log, signal or comment)
_ASKED = frozenset({"partition", "account", "qos", "reservation", "constraint", "time",
                    "nodes", "gpus-per-node", "gres", "cpus-per-task", "cpus-per-gpu", "mem",
                    "mem-per-gpu", "exclusive"})


def test_only_header(spec: RunSpec, folder: Path) -> list[HeaderLine]:
    """The header a job of ``spec`` carries (its log in ``folder``)."""
    from hpceval import __version__
    from hpceval.render.context import JobContext

    ctx = JobContext(str(folder), "doctor", "doctor", sys.executable, hpceval_version=__version__)
    return header_lines(spec, ctx, str(folder), spec.execution.nodes)


def staging_lines(configs: Sequence[ResolvedConfig],
                  environ: Mapping[str, str] | None = None) -> list[Line]:
    issues = preflight_all(configs, environ=environ)
    # what works but costs every job (a server image pulled at run time): the note's own words
    notes = [Line(LOGIN, note.path, Status.WARNING, note.message, note.fix)
             for note in preflight_notes(configs)]
    if not issues:
        return [Line(LOGIN, "images and data", Status.OK,
                     "everything the run reads is staged and readable from here"), *notes]
    return [*(Line(LOGIN, issue.path or "images and data", Status.PROBLEM, issue.message,
                   issue.fix) for issue in issues), *notes]


def read_mounts() -> str:
    try:
        return Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def mount_of(path: str, mounts: str) -> tuple[str, str]:
    """(mount point, filesystem type) that holds ``path``: the longest mount point above it,
    the later of two equal ones (a later mount hides an earlier one)."""
    real = os.path.realpath(path)
    best = ("", "unknown")
    for row in mounts.splitlines():
        parts = row.split()
        if len(parts) < 3:
            continue
        point = _unescape(parts[1])
        if within(real, point) and len(point) >= len(best[0]):
            best = (point, parts[2])
    return best


def shared_storage_line(check: str, key: str, path: str, mounts: str) -> Line:
    """Is ``path`` where every compute node sees it? Node-local: problem; local disk: warning
    (right only where every "node" is this machine, like the dev cluster); shared: ok."""
    point, fstype = mount_of(path, mounts)
    real = os.path.realpath(path)
    fix = f"set {key} to a path on shared storage (NFS, Lustre, GPFS, ...)"
    where = f"{path} ({fstype} at {point or '?'})"
    if fstype in NODE_LOCAL_FS or real.startswith(tuple(d + "/" for d in NODE_LOCAL_DIRS)):
        return Line(LOGIN, check, Status.PROBLEM, f"{where} is node-local", fix)
    if fstype in SHARED_FS:
        return Line(LOGIN, check, Status.OK, f"{where} is shared storage")
    return Line(LOGIN, check, Status.WARNING, f"{where} is a local filesystem: compute nodes "
                "other than this machine do not see it", f"{fix}, unless every node is this "
                "machine (a dev cluster)")


def python_line(python: str, mounts: str) -> Line:
    # The interpreter of a venv is a symlink to the base Python: the venv's folder is what the
    # nodes must see (its site-packages hold hpceval).
    folder = os.path.dirname(os.path.abspath(python))
    line = shared_storage_line("HPCEVAL_PYTHON", "execution.python", folder, mounts)
    return Line(line.where, line.check, line.status, f"{python}: {line.detail}", line.fix)


def private_folder(output_dir: str, mounts: str) -> tuple[Path | None, list[Line]]:
    """A folder only this user reads, under the output dir (making it is the writable check)."""
    check, key = "output dir", "execution.output_dir"
    if not os.path.isdir(output_dir):  # never made here: submit makes it, where it should
        return None, [_missing_output_dir(output_dir, mounts)]
    try:
        folder = Path(tempfile.mkdtemp(prefix=".hpceval-doctor-", dir=output_dir))
    except OSError as exc:
        return None, [Line(LOGIN, check, Status.PROBLEM, f"{output_dir} is not writable: "
                           f"{exc.strerror or exc}", f"set {key} to a folder you can write, "
                           "on shared storage")]
    line = shared_storage_line(check, key, output_dir, mounts)
    return folder, [Line(LOGIN, check, line.status, f"writable; {line.detail}", line.fix)]


def _missing_output_dir(output_dir: str, mounts: str) -> Line:
    check, key = "output dir", "execution.output_dir"
    parent = Path(output_dir)
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return Line(LOGIN, check, Status.PROBLEM, f"{output_dir} does not exist, and {parent}, "
                    "where submit would make it, is not a folder you can write",
                    f"set {key} to a folder you can write, on shared storage")
    # judged where it would be made (its place and mount), not by the folder above it: /tmp
    # itself is not under /tmp/, but what submit would make there is node-local
    storage = shared_storage_line(check, key, output_dir, mounts)
    status = Status.PROBLEM if storage.status is Status.PROBLEM else Status.WARNING
    return Line(LOGIN, check, status, f"{output_dir} does not exist yet (submit would make it "
                f"in {parent}): {storage.detail}", storage.fix if status is Status.PROBLEM else
                f"mkdir -p {output_dir} (on shared storage), then run doctor again: it makes "
                "nothing itself, and its job reports into that folder")


def _unescape(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as \040 \011 \012 \134
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def submit_limit_line(ex: ExecutionSpec) -> Line:
    """The limits on how many jobs the user may have queued (a QOS's MaxSubmitJobsPerUser, the
    association's MaxSubmitJobs, the GrpSubmitJobs of the QOS and the accounts, the cluster's
    MaxJobCount) and how many jobs count now: a sweep of more models than fit is refused at
    submit (backends/slurm/submit_limits.py, the same reads)."""
    from hpceval.backends.slurm.partitions import jobs_hidden, max_job_count
    from hpceval.backends.slurm.submit_limits import queued_jobs, submit_limits

    key = "queued jobs"
    cap = max_job_count()
    cluster = (f"; the cluster holds {cap} jobs at once (MaxJobCount: every user's, each "
               "array element one), and a run of more is refused at submit"
               if cap is not None else "")
    limits = list(submit_limits(job_place(ex)))
    if not limits:
        return Line(LOGIN, key, Status.OK, "no limit on your queued jobs known" + cluster)
    queued = queued_jobs(everyone=any(limit.everyone for limit in limits))
    shown = []
    for limit in limits:
        whose = "in the queue" if limit.everyone else "of yours in the queue"
        counted = "" if queued is None else f" ({limit.counted(queued)} {whose} now)"
        shown.append(f"{limit.what} {limit.jobs}{counted}")
    hidden = (" (other users' jobs are hidden from you here, PrivateData=jobs: the counts "
              f"of limits that include theirs are floors, and {SUBMIT} may still refuse a "
              "job midway)" if any(limit.everyone for limit in limits) and jobs_hidden()
              else "")
    return Line(LOGIN, key, Status.OK, "; ".join(shown) + ": a run of more jobs (each model "
                f"of a sweep is one) is refused at submit{hidden}" + cluster)
