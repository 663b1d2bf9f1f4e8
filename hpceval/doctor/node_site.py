"""What a real site does to a job, probed by the doctor's node job (hpc-admin-2 N11): the node's
own name and the address it resolves to, the NCCL interface the profile names, flock and free
space where the job writes, the partition's preemption mode, and submitting from a node.

The probes are bash run in the node job after node.py's (facts only); the lines are decided
here, on the login side. Scheduler commands come from the backend's words (commands.py), so
this module spells none itself.
"""

from __future__ import annotations

from collections.abc import Callable

from hpceval.backends.slurm.commands import PARTITION_SHOW, SUBMIT, TEST_ONLY
from hpceval.config.schema import ExecutionSpec
from hpceval.doctor.report import Line, Status
from hpceval.render.quoting import node_address_code
from hpceval.shell import quote

NODE = "node"
LOW_SPACE_GIB = 10  # below this, a job's caches and results may not fit: a warning
Fact = Callable[[str], "tuple[int, str] | None"]

BODY = r'''
me=$(hostname)
fact node_addr 0 "$me $(getent ahostsv4 "$me" 2>/dev/null | awk 'NR == 1 { print $1 }')"
if command -v ip > /dev/null; then probe addresses ip -4 -o addr show
else fact addresses 127 "no ip command"; fi
if [ -n "$NCCL_SOCKET_IFNAME" ]; then  # the servers' own choice (node_address, as they run it)
  node=$me
  { NODE_ADDRESS
  } 2> "$REPORT.address"
  fact nccl_choice 0 "${dev:--} ${addr:--}"  # - for none
  fact nccl_note 0 "$(cat "$REPORT.address")"
  rm -f "$REPORT.address"
fi
probe flock flock -w 5 "$REPORT.lock" true
rm -f "$REPORT.lock"
probe space df -Pk /tmp "${REPORT%/*}"
[ -n "$PARTITION" ] && probe preempt "${PARTITION_SHOW[@]}" "$PARTITION"
probe submit "${SUBMIT_TEST[@]}"
'''


def body() -> str:
    """The probes, with the servers' address choice pasted in where it runs."""
    return BODY.replace("NODE_ADDRESS\n", node_address_code())


def head(ex: ExecutionSpec, site_args: list[str]) -> list[str]:
    """The values the probes read, each quoted."""
    test = [*TEST_ONLY.split(), "--wrap=true", "--time=1", *site_args]
    return [f"PARTITION={quote(ex.partition or '')}",
            f"NCCL_SOCKET_IFNAME={quote(ex.env_vars.get('NCCL_SOCKET_IFNAME', ''))}",
            f"PARTITION_SHOW=({quote(list(PARTITION_SHOW))})",
            f"SUBMIT_TEST=({quote(test)})"]


def site_lines(ex: ExecutionSpec, fact: Fact) -> list[Line]:
    lines = [_address_line(ex, fact)]
    nccl = ex.env_vars.get("NCCL_SOCKET_IFNAME")
    if nccl:
        lines.append(_interface_line(nccl, fact))
    lines += [_flock_line(fact), *_space_lines(fact), _submit_line(ex, fact)]
    if ex.partition:
        lines.append(_preempt_line(ex, fact))
    return lines


def _address_line(ex: ExecutionSpec, fact: Fact) -> Line:
    out = (fact("node_addr") or (127, ""))[1]
    name, _, addr = out.partition(" ")
    check = "node address"
    if not addr:
        return Line(NODE, check, Status.WARNING, f"{name or 'the node'} does not resolve "
                    "(getent ahostsv4)", "multi-node jobs need node names that resolve: ask "
                    "the admins, or set NCCL_SOCKET_IFNAME in execution.env_vars")
    if not addr.startswith("127."):
        return Line(NODE, check, Status.OK, f"{name} is {addr}")
    detail = (f"{name} resolves to {addr}, a loopback address on the node itself: hpceval's "
              "servers across nodes advertise the address of their route to the other nodes "
              "instead, but whatever finds a node by its own name (torch.distributed's master, "
              "a Ray head, MPI) reaches the loopback and waits")
    fix = ("give the node's name its network address in /etc/hosts or DNS, or set "
           "NCCL_SOCKET_IFNAME in execution.env_vars to the interface the nodes reach each "
           "other on")
    if ex.nodes > 1:
        return Line(NODE, check, Status.PROBLEM, detail, fix)
    return Line(NODE, check, Status.WARNING, f"{detail} (this profile's jobs use one node)",
                fix)


def _interface_line(nccl: str, fact: Fact) -> Line:
    """What the servers' own address choice (node_address) made of NCCL_SOCKET_IFNAME."""
    check = "NCCL_SOCKET_IFNAME"
    dev, _, addr = (fact("nccl_choice") or (127, "- -"))[1].partition(" ")
    dev = "" if dev == "-" else dev
    note = (fact("nccl_note") or (127, ""))[1]
    if dev:
        return Line(NODE, check, Status.OK, f"{nccl}: {dev} has the IPv4 address {addr}")
    if "no IPv4 address on interface" not in note:
        return Line(NODE, check, Status.OK, f"{nccl}: excludes interfaces, names none")
    rc, out = fact("addresses") or (127, "not probed")
    names = sorted({row.split()[1] for row in out.splitlines()
                    if rc == 0 and len(row.split()) > 3})
    return Line(NODE, check, Status.PROBLEM, f"{nccl}: no interface {nccl.split(',')[0]} with an "
                f"IPv4 address on the node (it has: {', '.join(names) or out or 'none'})",
                "set NCCL_SOCKET_IFNAME in execution.env_vars to one of the node's interfaces")


def _flock_line(fact: Fact) -> Line:
    rc, out = fact("flock") or (127, "not probed")
    if rc == 0:
        return Line(NODE, "flock", Status.OK, "works in execution.output_dir")
    return Line(NODE, "flock", Status.PROBLEM, f"fails in execution.output_dir: "
                f"{out.strip() or f'exit {rc}'} (image pulls and caches are locked there)",
                "ask for a mount with locks (Lustre: -o flock), or set execution.output_dir "
                "on one")


def _space_lines(fact: Fact) -> list[Line]:
    rc, out = fact("space") or (127, "not probed")
    rows = [row.split() for row in out.splitlines()[1:]] if rc == 0 else []
    lines: list[Line] = []
    for where, row in zip(("/tmp", "execution.output_dir"), rows, strict=False):
        if len(row) < 6 or not row[3].isdigit():
            continue
        free = int(row[3]) / 2**20
        check = f"free space in {where}"
        text = f"{free:.1f} GiB free on {row[5]}"
        lines.append(Line(NODE, check, Status.OK, text) if free >= LOW_SPACE_GIB else
                     Line(NODE, check, Status.WARNING, f"only {text}", "servers' caches, "
                          "image unpacking and results need room: ask for scratch space, or "
                          "point execution.output_dir elsewhere"))
    if not lines:
        lines.append(Line(NODE, "free space", Status.WARNING, f"not measured: {out.strip()}"))
    return lines


def _preempt_line(ex: ExecutionSpec, fact: Fact) -> Line:
    rc, out = fact("preempt") or (127, "not probed")
    mode = next((w.split("=", 1)[1] for w in out.split() if w.startswith("PreemptMode=")), "")
    check = f"preemption on {ex.partition}"
    if rc != 0 or not mode:
        return Line(NODE, check, Status.WARNING, f"not read: {out.strip()[:200]}")
    if mode.startswith("REQUEUE"):
        what = "a preempted job is queued again under its id and continues there"
    elif mode.startswith("CANCEL"):
        what = ("a preempted job ends; " + ("auto_resume submits its successor"
                                           if ex.auto_resume else "execution.auto_resume is "
                                           "off, so it stays ended"))
    elif mode.startswith(("SUSPEND", "GANG")):
        return Line(NODE, check, Status.WARNING, f"PreemptMode={mode}: a preempted job is "
                    "suspended, its servers and tasks frozen mid-request",
                    "prefer a partition that cancels or requeues; a suspended job's requests "
                    "time out when it resumes")
    else:
        what = "jobs are not preempted"
    return Line(NODE, check, Status.OK, f"PreemptMode={mode}: {what}")


def _submit_line(ex: ExecutionSpec, fact: Fact) -> Line:
    rc, out = fact("submit") or (127, "not probed")
    check = f"{SUBMIT} from a node"
    if rc == 0:
        return Line(NODE, check, Status.OK, "works: a job can submit its successor")
    detail = f"{TEST_ONLY} failed on the node: {(out.strip().splitlines() or [f'exit {rc}'])[-1]}"
    if ex.auto_resume:
        return Line(NODE, check, Status.PROBLEM, detail + " (auto_resume submits successors "
                    "from inside the job)", "ask the admins to allow submission from compute "
                    "nodes, or set execution.auto_resume=false")
    return Line(NODE, check, Status.OK, detail + " (not needed: auto_resume is off)")
