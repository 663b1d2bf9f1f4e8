"""Multi-node serving on real clusters: what each server step sees, run in bash.

The review of the rendered multi-node scripts against vLLM 0.32's source
(/work/shared/reviews/hpc-admin.md D3, D8, D9, D11, D14) found defects that only show on real
clusters. Each test takes the rendered fragment out of a job script and runs it (or reads the
exact rendered line), so what is checked is what the job runs:

* every server step exports this node's own address as VLLM_HOST_IP (vLLM's get_ip() falls back
  to the default route's address, or 0.0.0.0 without one), from the site's NCCL interface when
  it names one (then GLOO_SOCKET_IFNAME too), into Apptainer's environment as well;
* Apptainer's --cleanenv keeps the step's CUDA_VISIBLE_DEVICES also when nothing is sliced;
* Ray: per-job temp dir, no dashboard, its client port from the job's block, RAY_ADDRESS for
  the waiter and vLLM, every node started with its own address;
* pyxis harness steps run on the batch node (they call the proxy on 127.0.0.1);
* an instance is ready only when THIS job's part of its (appended) log says vLLM serves.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from render_helpers import RenderFn
from test_job_trust import (  # noqa: F401  (squatter: a fixture)
    VLLM_RUN,
    function,
    health_wait,
    squatter,
)

MULTI = {**VLLM_RUN, "deployment": {**VLLM_RUN["deployment"], "tensor_parallel_size": 8,
                                   "pipeline_parallel_size": 2}}  # 16 GPUs: two nodes
TWO_NODES = ["execution.nodes=2"]


def pin_gpus(script: str) -> str:
    match = re.search(r"^PIN_GPUS='(.*?)'$", script, re.S | re.M)
    assert match, "no PIN_GPUS in the script"
    return match.group(1)


SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def run_step(script: str, first: int, count: int, node: str = "localhost", peer: str = "",
             path: str = SYSTEM_PATH, **env: str) -> subprocess.CompletedProcess[bytes]:
    """The rendered step wrapper, started for NODE and PEER as launch_server starts it, with
    `env -0` as the server command."""
    return subprocess.run(["/bin/bash", "-c", pin_gpus(script), "pin-gpus", node, peer, str(first),
                           str(count), "env", "-0"], capture_output=True, timeout=60,
                          check=False, env={"PATH": path, **env})


def step_env(script: str, first: int, count: int, node: str = "localhost", peer: str = "",
             path: str = SYSTEM_PATH, **env: str) -> dict[str, str]:
    """The environment the server command gets from the rendered step wrapper."""
    out = run_step(script, first, count, node, peer, path, **env)
    assert out.returncode == 0, out.stderr.decode()
    return dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if item)


def test_each_server_step_advertises_its_own_nodes_address(render: RenderFn) -> None:
    script = render("slurm", MULTI, TWO_NODES)  # apptainer --cleanenv
    got = step_env(script, 0, 0, VLLM_HOST_IP="10.9.9.9")
    # the node's name (the scheduler's), resolved on it; never a value inherited from the batch node
    assert got["VLLM_HOST_IP"] == "127.0.0.1", got
    assert got["APPTAINERENV_VLLM_HOST_IP"] == got["SINGULARITYENV_VLLM_HOST_IP"] == "127.0.0.1"
    assert "GLOO_SOCKET_IFNAME" not in got  # no interface named by the site: vLLM/gloo choose


# --- N4 (hpc-admin-2): a node that resolves its own name to loopback ---------------------------
# Ubuntu and cloud-init nodes map their own name to 127.0.1.1 in /etc/hosts while every other
# node's name resolves to its network address. `getent` is faked (the site's name service); `ip`
# is the real one, or a strict fake for an address this machine has no route to.

def fake_name_service(tmp_path: Path, hosts: dict[str, str],
                      routes: dict[str, str] | None = None) -> str:
    """A PATH with `getent ahostsv4 NAME` answering from HOSTS (nothing else: exit 2, as getent
    does for an unknown name) and, given ROUTES, `ip -4 -o route get ADDR` answering its source
    address from them (any other route fails; addresses are the machine's own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cases = "".join(f"  'ahostsv4 {name}') echo '{addr}      STREAM {name}';;\n"
                    for name, addr in hosts.items())
    getent = bin_dir / "getent"
    getent.write_text(f'#!/bin/bash\ncase "$*" in\n{cases}  *) exit 2;;\nesac\n')
    getent.chmod(0o755)
    if routes is not None:
        cases = "".join(f"  '-4 -o route get {dst}') echo '{dst} dev eth1 src {src} uid 1000 "
                        "\\    cache ';;\n" for dst, src in routes.items())
        cases += "  '-4 -o addr show') /usr/sbin/ip -4 -o addr show | grep -w lo; " + "".join(
            f"echo '2: eth1    inet {src}/24 scope global eth1\\       valid_lft forever'; "
            for src in routes.values()) + ";;\n"  # this machine's loopback, and eth1
        ip = bin_dir / "ip"
        ip.write_text(f'#!/bin/bash\ncase "$*" in\n{cases}  *route*) echo "ip $*" >&2; exit 1;;\n'
                      '  *) exec /usr/sbin/ip "$@";;\nesac\n')  # addresses: the real ones
        ip.chmod(0o755)
    return f"{bin_dir}:{SYSTEM_PATH}"


def own_address() -> str | None:
    """A non-loopback IPv4 address of this machine (its own routes reach it), or None."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                         check=False).stdout
    found = [row.split()[3].split("/")[0] for row in out.splitlines() if len(row.split()) > 3]
    return next((a for a in found if not a.startswith("127.")), None)


def test_a_node_that_resolves_its_own_name_to_loopback_advertises_its_route_to_the_peer(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    path = fake_name_service(tmp_path, {"gpu01": "127.0.1.1", "gpu02": "198.18.0.2"},
                             routes={"198.18.0.2": "198.18.0.1"})
    got = step_env(script, 0, 0, node="gpu01", peer="gpu02", path=path)
    # before: 127.0.1.1, and the workers waited for the head until the health timeout
    assert got["VLLM_HOST_IP"] == got["APPTAINERENV_VLLM_HOST_IP"] == "198.18.0.1", got
    # and gloo that address's interface: else it advertised 127.0.1.1, what the node's own name
    # resolves to, and the other node connected to its own loopback (the site in a box's node2)
    assert got["GLOO_SOCKET_IFNAME"] == got["APPTAINERENV_GLOO_SOCKET_IFNAME"] == "eth1", got
    # one node (no peer): the node's own name, as before (loopback is right for itself)
    alone = step_env(script, 0, 0, node="gpu01", path=path)
    assert alone["VLLM_HOST_IP"] == "127.0.1.1" and "GLOO_SOCKET_IFNAME" not in alone
    # the site's NCCL interface still comes first
    assert step_env(script, 0, 0, node="gpu01", peer="gpu02", path=path,
                    NCCL_SOCKET_IFNAME="lo")["VLLM_HOST_IP"] == "127.0.0.1"


def test_the_route_is_read_from_the_real_ip_command_and_a_python_socket_without_it(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    mine = own_address()
    hosts = {"gpu01": "127.0.1.1", "same-host": "127.0.0.1", **({"gpu02": mine} if mine else {})}
    path = fake_name_service(tmp_path, hosts)
    no_ip_dir = tmp_path / "no-ip"  # a container's view: the step's tools, but no `ip`
    no_ip_dir.mkdir()
    for tool in ("getent", "python3", "env", "hostname"):
        found = tmp_path / "bin" / tool
        (no_ip_dir / tool).symlink_to(found if found.exists() else
                                       shutil.which(tool, path=SYSTEM_PATH) or tool)
    no_ip = str(no_ip_dir)
    assert subprocess.run(["/bin/bash", "-c", "command -v ip"], env={"PATH": no_ip},
                          check=False).returncode != 0
    for where in (path, no_ip):
        # every node one host (the dev cluster): loopback is right
        assert step_env(script, 0, 0, node="gpu01", peer="same-host", path=where)[
            "VLLM_HOST_IP"] == "127.0.0.1"
        if mine:  # a peer at this machine's own address: the route's source is that address
            assert step_env(script, 0, 0, node="gpu01", peer="gpu02", path=where)[
                "VLLM_HOST_IP"] == mine


def test_a_loopback_route_to_another_host_or_an_unknown_peer_stops_the_step(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    path = fake_name_service(tmp_path, {"gpu01": "127.0.1.1", "gpu02": "198.18.0.2"},
                             routes={"198.18.0.2": "127.0.0.1"})
    looped = run_step(script, 0, 0, node="gpu01", peer="gpu02", path=path)
    assert looped.returncode == 98 and b"env" not in looped.stdout, looped
    assert b"a loopback address: set NCCL_SOCKET_IFNAME" in looped.stderr, looped.stderr
    unknown = run_step(script, 0, 0, node="gpu01", peer="gpu03", path=path)
    assert unknown.returncode == 98, unknown
    assert b"cannot resolve gpu03 (getent ahostsv4)" in unknown.stderr, unknown.stderr


def test_each_launch_of_an_instance_across_nodes_names_its_peer(render: RenderFn) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    launches = re.findall(r"^launch_server 0 (\S+) (\S+) (\S+) ", script, re.M)
    assert launches == [("head", '"${NODES[0]}"', '"${NODES[1]}"'),
                        ("worker-1", '"${NODES[1]}"', '"${NODES[0]}"')], launches
    one = render("slurm", VLLM_RUN)
    assert re.findall(r"^launch_server 0 (\S+) (\S+) (\S+) ", one, re.M) == [
        ("head", '"${NODES[0]}"', "''")]
    assert "reached_at() {" not in one  # only scripts with an instance across nodes carry it


def test_rays_head_address_is_the_route_to_a_joining_node_where_its_name_is_loopback(
        render: RenderFn, tmp_path: Path) -> None:
    run = {**MULTI, "deployment": {**MULTI["deployment"], "multi_node_backend": "ray"}}
    script = render("slurm", run, TWO_NODES)
    assert re.search(r'^HEAD_IP=\$\(node_ip "\$HEAD_NODE" "\$\{NODES\[1\]\}"\) \|\| exit 1$',
                     script, re.M), script
    code = function(script, "reached_at") + "\n" + function(script, "node_ip") + """
log() { echo "log: $*"; }
job_failure() { :; }
node_ip gpu01 gpu02
"""
    path = fake_name_service(tmp_path, {"gpu01": "127.0.1.1", "gpu02": "198.18.0.2",
                                        "gpu03": "198.18.0.3"},
                             routes={"198.18.0.2": "198.18.0.1"})
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                         check=False, env={"PATH": path})
    assert (out.returncode, out.stdout) == (0, "198.18.0.1\n"), out
    # a head on another node: its name, as this node resolves it
    elsewhere = code.replace("node_ip gpu01 gpu02", "node_ip gpu03 gpu02")
    other = subprocess.run(["bash", "-c", elsewhere], capture_output=True, text=True,
                           timeout=60, check=False, env={"PATH": path})
    assert other.stdout == "198.18.0.3\n", other


def test_the_sites_nccl_interface_gives_the_address_and_gloos_interface(
        render: RenderFn) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    # apptainer: the profile's NCCL_SOCKET_IFNAME reaches the step as APPTAINERENV_ only
    got = step_env(script, 0, 0, APPTAINERENV_NCCL_SOCKET_IFNAME="lo")
    assert got["VLLM_HOST_IP"] == "127.0.0.1" and got["GLOO_SOCKET_IFNAME"] == "lo", got
    assert got["APPTAINERENV_GLOO_SOCKET_IFNAME"] == "lo", got
    # NCCL's prefix form ("lo" matches "lo", "=lo" only exactly) and its exclusion form "^..."
    # (no interface to take an address from: the node name's)
    assert step_env(script, 0, 0, NCCL_SOCKET_IFNAME="=lo")["GLOO_SOCKET_IFNAME"] == "lo"
    excluded = step_env(script, 0, 0, NCCL_SOCKET_IFNAME="^docker")
    assert excluded["VLLM_HOST_IP"] == "127.0.0.1" and "GLOO_SOCKET_IFNAME" not in excluded


def test_apptainer_gets_the_steps_devices_also_when_nothing_is_sliced(render: RenderFn) -> None:
    script = render("slurm", MULTI, TWO_NODES)
    got = step_env(script, 0, 0, CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert got["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "4,5,6,7", got
    assert got["SINGULARITYENV_CUDA_VISIBLE_DEVICES"] == "4,5,6,7", got
    sliced = step_env(script, 1, 2, CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert sliced["CUDA_VISIBLE_DEVICES"] == sliced["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "5,6"
    none = step_env(script, 0, 0)
    assert "APPTAINERENV_CUDA_VISIBLE_DEVICES" not in none  # no GPUs: nothing to forward


def test_ray_is_per_job_and_every_node_starts_with_its_own_address(render: RenderFn) -> None:
    run = {**MULTI, "deployment": {**MULTI["deployment"], "multi_node_backend": "ray"}}
    script = render("slurm", run, TWO_NODES)
    starts = re.findall(r"launch_server 0 (ray-\S+) .*?\n((?:  .*\n)+)", script)
    assert [role for role, _ in starts] == ["ray-head", "ray-worker-1"], script
    for role, lines in starts:
        words = " ".join(lines.split())
        # the address the step resolved on its own node (VLLM_HOST_IP: the same vLLM checks)
        assert '"$RAY_NODE" ray-node' in words, words
        assert '"$RAY_NODE" ray-node "${RAY_TEMP_DIR}"' in words, words  # removed at its end
        if role == "ray-head":
            assert '--temp-dir "${RAY_TEMP_DIR}"' in words, words
            assert "--include-dashboard=false" in words, words
            assert '--ray-client-server-port "${RAY_CLIENT_PORT}"' in words, words
    ray_node = re.search(r"^RAY_NODE='(.*?)'$", script, re.S | re.M)
    assert ray_node and '--node-ip-address "$VLLM_HOST_IP"' in ray_node.group(1)
    # a fresh unguessable name per start, made new (0700) by RAY_NODE on each node: a node's
    # /tmp is every user's (shared-cluster-4 N5)
    assert re.search(r'^RAY_TEMP_DIR=\$\(mktemp -u "/tmp/ray-\$\{HPCEVAL_JOB_ID\}-XXXXXX"\)$',
                     script, re.M), script
    assert re.search(r"^RAY_CLIENT_PORT=\$\(\(PORT_BASE \+ \d+ \+ 0\)\)$", script, re.M), script
    # the waiter and vLLM attach to THIS job's cluster, not the newest one on the node
    head = re.search(r"launch_server 0 head .*?\n((?:  .*\n)+)", script)
    assert head and '"$WAIT_FOR_RAY" wait-for-ray 2 "${HEAD_IP}:${COORD_PORT}"' in " ".join(
        head.group(1).split())
    waiter = re.search(r"^WAIT_FOR_RAY='(.*?)'$", script, re.S | re.M)
    assert waiter and "export RAY_ADDRESS" in waiter.group(1)
    assert 'address=\\"auto\\"' not in waiter.group(1)


def test_pyxis_harness_steps_run_on_the_batch_node(render: RenderFn) -> None:
    run = {**MULTI, "deployment": {**MULTI["deployment"], "image": "docker://vllm/vllm:1"}}
    script = render("slurm", run, [*TWO_NODES, "execution.container_runtime=pyxis"])
    harness = re.findall(r"^  start_task .*\n((?:    .*\n)+)", script, re.M)
    assert harness, script
    for step in harness:
        words = [w for w in step.split() if w != "\\"]
        assert words[:6] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--export=ALL",
                             '--nodelist="$SLURMD_NODENAME"'], words


def test_the_ready_line_of_an_earlier_job_in_the_appended_log_does_not_count(
        render: RenderFn, squatter: int, tmp_path: Path) -> None:  # noqa: F811
    script = render("slurm", VLLM_RUN)
    ready_line = re.search(r"^INSTANCE_READY\+=\('(.+)'\)$", script, re.M)
    assert ready_line
    assert re.search(r"^INSTANCE_LOG_FROM\+=\(\"\$HEAD_LOG_FROM\"\)$", script, re.M), \
        "the health wait does not know where this job's part of the log starts"
    log = tmp_path / "instance-0.log"
    earlier = f"INFO {ready_line.group(1)}http://0.0.0.0:{squatter}\n"  # the last allocation's
    log.write_text(earlier + "INFO loading weights\n")
    server = subprocess.Popen(["sleep", "60"])
    code = health_wait(script, ready_line.group(1), log, server.pid, squatter,
                       log_from=len(earlier))
    try:
        run = ["bash", "-c", code, "wait"]
        env = {"PATH": "/usr/bin:/bin"}
        stale = subprocess.run([*run, "3"], capture_output=True, text=True, timeout=60,
                               check=False, env=env)
        assert stale.returncode == 1 and "0 of 1 instance(s)" in stale.stdout, stale.stdout
        log.write_text(log.read_text() + earlier)  # this job's vLLM says it serves
        ready = subprocess.run([*run, "10"], capture_output=True, text=True, timeout=60,
                               check=False, env=env)
        assert ready.returncode == 0 and "all instances ready" in ready.stdout, ready.stdout
    finally:
        server.kill()
        server.wait()


def test_launch_server_records_where_this_jobs_part_of_the_log_starts(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("local-dev", {**VLLM_RUN, "deployment": {**VLLM_RUN["deployment"],
                                                             "runtime": "host"}})
    log = tmp_path / "instance-0.log"
    log.write_text("an earlier job's output\n")
    code = function(script, "launch_server") + f"""
log() {{ :; }}
SERVER_DIR={tmp_path} SERVER_ENV=true SERVER_WHAT=model PIN_GPUS='shift 4; exec "$@"'
launch_server 0 head n1 '' 0 0 echo new
wait
echo "from=$HEAD_LOG_FROM"
"""
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                         check=False, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"from={len('an earlier job' + chr(39) + 's output') + 1}"
    assert log.read_text().endswith("new\n")


def test_a_ray_node_removes_the_jobs_temp_dir_once_ray_has_ended_on_term(
        render: RenderFn, tmp_path: Path) -> None:
    """hpc-admin-2 N6: /tmp/ray-<job> was left on every node. TERM at teardown goes to every
    process of the step (scancel --signal=TERM): Ray ends, then the wrapper removes the dir."""
    run = {**MULTI, "deployment": {**MULTI["deployment"], "multi_node_backend": "ray"}}
    script = render("slurm", run, TWO_NODES)
    ray_node = re.search(r"^RAY_NODE='(.*?)'$", script, re.S | re.M)
    assert ray_node
    temp = tmp_path / "ray-42"
    # a stand-in for `ray start --block`: writes its session files, ends 0 on TERM after a beat
    fake_ray = ("mkdir -p \"$0/session_latest\"; trap 'sleep 0.5; exit 0' TERM; "
                "while :; do sleep 0.1; done")
    step = subprocess.Popen(["bash", "-c", ray_node.group(1), "ray-node", str(temp),
                             "bash", "-c", fake_ray, str(temp)], start_new_session=True,
                            env={"PATH": SYSTEM_PATH, "VLLM_HOST_IP": "198.18.0.1"})
    deadline = time.monotonic() + 30
    while not (temp / "session_latest").exists():
        assert time.monotonic() < deadline and step.poll() is None
        time.sleep(0.1)
    os.killpg(step.pid, signal.SIGTERM)  # every process of the step, as the scheduler sends it
    assert step.wait(timeout=30) == 0
    assert not temp.exists()


def test_a_ray_node_makes_its_temp_dir_private_and_refuses_one_that_exists(
        render: RenderFn, tmp_path: Path) -> None:
    """shared-cluster-4 N5: a node's /tmp is every user's; Ray's session files (sockets, logs)
    go only into a folder the step made itself, 0700. One that is already there (planted under
    a guessed name) stops the step before Ray starts."""
    run = {**MULTI, "deployment": {**MULTI["deployment"], "multi_node_backend": "ray"}}
    ray_node = re.search(r"^RAY_NODE='(.*?)'$", render("slurm", run, TWO_NODES), re.S | re.M)
    assert ray_node
    temp = tmp_path / "ray-42-abcdef"
    show = ["bash", "-c", 'stat -c %a "$0"', str(temp)]
    made = subprocess.run(["bash", "-c", ray_node.group(1), "ray-node", str(temp), *show],
                          capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": SYSTEM_PATH, "VLLM_HOST_IP": "198.18.0.1"})
    assert made.returncode == 0, made.stderr
    assert made.stdout.split()[0] == "700" and not temp.exists()  # removed at its end
    temp.mkdir(mode=0o777)
    refused = subprocess.run(["bash", "-c", ray_node.group(1), "ray-node", str(temp), *show],
                             capture_output=True, text=True, timeout=30, check=False,
                             env={"PATH": SYSTEM_PATH, "VLLM_HOST_IP": "198.18.0.1"})
    assert refused.returncode == 96 and refused.stdout == "", refused
    assert "cannot make the Ray temp dir" in refused.stderr and temp.exists()


RAY = {**MULTI, "deployment": {**MULTI["deployment"], "multi_node_backend": "ray"}}


def teardown(script: str, ray_temp_dir: Path) -> subprocess.CompletedProcess[str]:
    """The rendered cleanup (the EXIT trap), after servers that stop_servers stands in for."""
    body = (function(script, "cleanup") + "\nlog() { :; }\nmark() { :; }\nstop_servers() { :; }\n"
            "TASK_PIDS=() PROXY_PIDS=() SERVER_PIDS=(1) PROXY_DIRS=() STOPPING=1 LOCK_PID=\n"
            f"RAY_TEMP_DIR={ray_temp_dir}\ncleanup\n")
    return subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": SYSTEM_PATH})


def test_teardown_removes_the_jobs_ray_temp_dir_left_on_its_node(render: RenderFn,
                                                                 tmp_path: Path) -> None:
    """hpc-admin-2 N6/D11: RAY_NODE removes the temp dir once Ray ends on TERM, but a Ray that
    outlives the grace is killed with its step, the wrapper too, and the dir (Ray's sockets,
    logs, spilled objects) stayed in the node's /tmp. The job's teardown removes it on its
    node; only a folder of this user's, never a link."""
    script = render("slurm", RAY, TWO_NODES)
    temp = tmp_path / "ray-42-abcdef"
    (temp / "session_latest" / "sockets").mkdir(parents=True)
    temp.chmod(0o700)
    out = teardown(script, temp)
    assert out.returncode == 0 and out.stderr == "", out
    assert not temp.exists()
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    (elsewhere / "kept").write_text("x")
    temp.symlink_to(elsewhere)
    assert teardown(script, temp).returncode == 0
    assert temp.is_symlink() and (elsewhere / "kept").exists()
    # a job without Ray has nothing of the kind to remove
    assert "RAY_TEMP_DIR" not in function(render("slurm", MULTI, TWO_NODES), "cleanup")


# The longest path Ray puts under its temp dir: a Unix socket (whose path must fit in 107
# bytes), in session_<date>_<time>_<microseconds>_<pid of ray start>/sockets/ (pid_max 4194304).
RAY_SOCKET = "/session_2026-12-31_23-59-59_999999_4194304/sockets/plasma_store"


def test_the_ray_temp_dir_leaves_room_for_rays_socket_paths(render: RenderFn) -> None:
    """Ray's sockets go under its temp dir: the dir's path is short by construction (a fixed
    folder in /tmp and the job's number, at most 10 digits in Slurm), with room to spare."""
    script = render("slurm", RAY, TWO_NODES)
    line = re.search(r"^RAY_TEMP_DIR=.*$", script, re.M)
    assert line
    out = subprocess.run(["bash", "-c", f'{line.group(0)}\necho "$RAY_TEMP_DIR"'],
                         capture_output=True, text=True, timeout=30, check=True,
                         env={"PATH": SYSTEM_PATH, "HPCEVAL_JOB_ID": "4294967295"})
    temp = out.stdout.strip()
    assert re.fullmatch(r"/tmp/ray-4294967295-\w{6}", temp), temp
    assert len((temp + RAY_SOCKET).encode()) <= 107 - 10, temp
