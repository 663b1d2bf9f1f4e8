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

import re
import subprocess
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


def step_env(script: str, first: int, count: int, node: str = "localhost",
             **env: str) -> dict[str, str]:
    """The environment the server command gets from the rendered step wrapper, started for
    NODE (launch_server passes the node it starts the step on)."""
    out = subprocess.run(["bash", "-c", pin_gpus(script), "pin-gpus", node, str(first),
                          str(count), "env", "-0"], capture_output=True, timeout=60, check=False,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env})
    assert out.returncode == 0, out.stderr.decode()
    return dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if item)


def test_each_server_step_advertises_its_own_nodes_address(render: RenderFn) -> None:
    script = render("slurm", MULTI, TWO_NODES)  # apptainer --cleanenv
    got = step_env(script, 0, 0, VLLM_HOST_IP="10.9.9.9")
    # the node's name (the scheduler's), resolved on it; never a value inherited from the batch node
    assert got["VLLM_HOST_IP"] == "127.0.0.1", got
    assert got["APPTAINERENV_VLLM_HOST_IP"] == got["SINGULARITYENV_VLLM_HOST_IP"] == "127.0.0.1"
    assert "GLOO_SOCKET_IFNAME" not in got  # no interface named by the site: vLLM/gloo choose


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
        if role == "ray-head":
            assert '--temp-dir "/tmp/ray-${HPCEVAL_JOB_ID}"' in words, words
            assert "--include-dashboard=false" in words, words
            assert '--ray-client-server-port "${RAY_CLIENT_PORT}"' in words, words
    ray_node = re.search(r"^RAY_NODE='(.*?)'$", script, re.S | re.M)
    assert ray_node and '--node-ip-address "$VLLM_HOST_IP"' in ray_node.group(1)
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
SERVER_DIR={tmp_path} SERVER_ENV=true SERVER_WHAT=model PIN_GPUS='shift 3; exec "$@"'
launch_server 0 head n1 0 0 echo new
wait
echo "from=$HEAD_LOG_FROM"
"""
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                         check=False, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"from={len('an earlier job' + chr(39) + 's output') + 1}"
    assert log.read_text().endswith("new\n")
