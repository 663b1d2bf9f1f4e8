"""Review F1: a job-launched server that exits mid-task must not be replaced by whoever takes
its port. The proxy is given the pids of the processes the job started for each instance; once
one has exited (a zombie included), the instance is down for good: no request, no token and no
probe goes to its port, nothing it answers is cached, and it never comes back. Here the fake
upstream keeps listening after the "server process" (a real child process) is killed: it plays
the other uid that bound the port."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.liveness import alive, parse_pids

MakeConfig = Callable[..., ProxyConfig]


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


async def _post(base: str, body: dict[str, object]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/chat/completions",
                                                    json=body) as r:
        return r.status, await r.text()


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
async def test_a_server_whose_process_exited_is_down_for_good_whatever_answers_its_port(
        make_config: MakeConfig, tmp_path: Path, reaped: bool) -> None:
    server_process = subprocess.Popen(["sleep", "300"])
    port_owner = FakeUpstream(reply=lambda _b, n: f"answer {n}")
    try:
        async with running_upstreams(port_owner) as urls:
            config = make_config(urls, upstream_pids=((server_process.pid,),),
                                 upstream_api_key="job-token", max_retries=1)
            async with running_proxy(config) as (server, base):
                status, _ = await _post(base, chat("before"))
                assert status == 200 and port_owner.hits == 1
                os.kill(server_process.pid, signal.SIGKILL)
                if reaped:
                    server_process.wait()
                else:
                    while _state(server_process.pid) != "Z":
                        await asyncio.sleep(0.01)
                port_owner.reply = lambda _b, n: "ATTACKER CONTROLLED ANSWER"
                status, text = await _post(base, chat("after"))
                await asyncio.sleep(0.3)  # several probe intervals: it must not come back
                (inst,) = server.balancer.instances
                server.balancer.mark_up(inst)
                assert not inst.up and "server process exited" in (inst.last_error or "")
                health = await asyncio.wait_for(_health(base), 5)
        assert status == 503 and "ATTACKER" not in text, text
        assert health == 503
        assert port_owner.hits == 1  # nothing (and no token) went to the port again
        assert [h.get("Authorization") for h in port_owner.headers] == ["Bearer job-token"]
        shards = sorted((tmp_path / "cache").glob("shard-*.jsonl"))
        stored = b"".join(p.read_bytes() for p in shards)
        assert b"ATTACKER" not in stored and stored.count(b"\n") == 1
        progress = json.loads((tmp_path / "progress.json").read_text())
        assert [i["state"] for i in progress["instances"]] == ["down"]
    finally:
        server_process.kill()
        server_process.wait()


async def _health(base: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(base + "/health") as r:
        return r.status


async def test_an_answer_that_arrives_after_its_server_exited_is_not_passed_on(
        make_config: MakeConfig, tmp_path: Path) -> None:
    """The server exits while the request is out: what comes back on its port is not its."""
    server_process = subprocess.Popen(["sleep", "300"])
    port_owner = FakeUpstream(delay=0.5, reply=lambda _b, n: "ATTACKER CONTROLLED ANSWER")
    try:
        async with running_upstreams(port_owner) as urls:
            config = make_config(urls, upstream_pids=((server_process.pid,),), max_retries=0)
            async with running_proxy(config) as (_, base):
                pending = asyncio.ensure_future(_post(base, chat("in flight")))
                while port_owner.hits == 0:
                    await asyncio.sleep(0.01)
                server_process.kill()
                server_process.wait()
                status, text = await pending
        assert status in (502, 503) and "ATTACKER" not in text, text
        assert not list((tmp_path / "cache").glob("shard-*.jsonl")) or b"ATTACKER" not in b"".join(
            p.read_bytes() for p in (tmp_path / "cache").glob("shard-*.jsonl"))
    finally:
        server_process.kill()
        server_process.wait()


class _NoProbe:
    """Sessions that fail the test if the proxy asks anything of the port."""

    def of(self, inst: object) -> aiohttp.ClientSession:
        raise AssertionError(f"probed {inst}")


async def test_a_dropped_connection_to_a_server_that_exited_is_put_down_to_its_exit() -> None:
    """A request's connection reset comes before the probe of /health; when the job's server
    process has exited, that is the reason recorded, and its port is not asked at all."""
    gone = subprocess.Popen(["sleep", "300"])
    gone.kill()
    gone.wait()
    balancer = Balancer(["http://127.0.0.1:9"], pids=((gone.pid,),))
    (inst,) = balancer.instances
    balancer.suspect(inst, "connection lost: reset by peer", _NoProbe())  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not inst.up and "server process exited" in (inst.last_error or "")


async def test_a_server_that_exits_while_its_port_is_probed_is_put_down_to_its_exit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI met: the reset arrives while the killed server is not yet a zombie, so the
    probe runs; by the time it fails, the process is gone, and that is the reason."""
    monkeypatch.setattr("hpceval.job.proxy.balancer.SETTLE_S", 0.0)  # probed at once
    server_process = subprocess.Popen(["sleep", "300"])
    try:
        balancer = Balancer(["http://127.0.0.1:9"], pids=((server_process.pid,),))
        (inst,) = balancer.instances

        async def probe_while_it_dies(_inst: object, _sessions: object) -> bool:
            server_process.kill()
            server_process.wait()
            return False

        balancer.probe = probe_while_it_dies  # type: ignore[method-assign]
        balancer.suspect(inst, "connection lost: reset by peer", _NoProbe())  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not inst.up and "server process exited" in (inst.last_error or "")
    finally:
        server_process.kill()
        server_process.wait()


async def test_a_suspected_server_is_held_until_its_step_has_had_time_to_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """shared-cluster-4 F1(c): the killed vLLM's connections drop a moment before its step (and
    the srun the proxy watches) ends; another uid's port answered the probe and 19 requests in
    that moment. Now nothing goes to the port during the hold, and after it the pid decides."""
    monkeypatch.setattr("hpceval.job.proxy.balancer.SETTLE_S", 0.6)
    step = subprocess.Popen(["sleep", "0.3"])  # the step ends 0.3 s after the drop
    try:
        balancer = Balancer(["http://127.0.0.1:9"], pids=((step.pid,),))
        (inst,) = balancer.instances
        balancer.suspect(inst, "connection lost: EOF", _NoProbe())  # type: ignore[arg-type]
        # a request in the meantime waits for the hold, then is refused: not the job's server
        assert await balancer.settled(inst) is False
        step.wait()
        await asyncio.sleep(0.05)
        assert not inst.up and "server process exited" in (inst.last_error or "")
    finally:
        step.kill()
        step.wait()


async def test_a_held_server_whose_step_still_runs_is_probed_and_stays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpceval.job.proxy.balancer.SETTLE_S", 0.2)
    step = subprocess.Popen(["sleep", "300"])
    probed: list[float] = []
    try:
        balancer = Balancer(["http://127.0.0.1:9"], pids=((step.pid,),))
        (inst,) = balancer.instances

        async def answers(_inst: object, _sessions: object) -> bool:
            probed.append(asyncio.get_running_loop().time())
            return True

        balancer.probe = answers  # type: ignore[method-assign]
        suspected_at = asyncio.get_running_loop().time()
        balancer.suspect(inst, "timed out", _NoProbe())  # type: ignore[arg-type]
        assert await balancer.settled(inst) is True
        await asyncio.sleep(0.05)
        assert inst.up and len(probed) == 1 and probed[0] - suspected_at >= 0.19
    finally:
        step.kill()
        step.wait()


def test_external_upstreams_still_come_back_and_a_job_server_does_not() -> None:
    for external, back in ((True, True), (False, False)):
        balancer = Balancer(["http://a:1"], external=external)
        (inst,) = balancer.instances
        balancer.mark_down(inst, "refused")
        balancer.mark_up(inst)
        assert inst.up is back


def test_pids_are_given_per_upstream_and_checked() -> None:
    args = build_parser().parse_args([
        "--port", "0", "--upstream", "http://a:1", "--upstream", "http://b:1",
        "--upstream-pids", "10,11",
        "--upstream-pids", "12", "--cache-dir", "c", "--progress-file", "p"])
    assert config_from_args(args).upstream_pids == ((10, 11), (12,))
    with pytest.raises(ValueError, match="one per upstream"):
        ProxyConfig(upstreams=("http://a:1", "http://b:1"), upstream_pids=((10,),))
    for bad in ("", "x", "1", "3,-4"):
        with pytest.raises(ValueError, match="--upstream-pids"):
            parse_pids(bad)
    assert alive(os.getpid()) and not alive(2 ** 22 + 7)


@pytest.mark.parametrize("which", ["head", "worker"])
def test_an_instance_is_down_once_any_one_of_its_processes_exited(which: str) -> None:
    """A multi-node instance has one launch per node (templates/deployment/_instances.j2): a
    head whose `srun` exited while a worker's lives is no longer the job's server, whatever
    answers its port, and neither is a head whose worker died. One dead pid is enough."""
    gone = subprocess.Popen(["sleep", "300"])
    gone.kill()
    gone.wait()
    pids = (gone.pid, os.getpid()) if which == "head" else (os.getpid(), gone.pid)
    balancer = Balancer(["http://127.0.0.1:9"], pids=(pids,))
    (inst,) = balancer.instances
    assert balancer.pick() is None
    assert not inst.up and "server process exited" in (inst.last_error or "")
    # while all of them run, the instance is trusted
    both = Balancer(["http://127.0.0.1:9"], pids=((os.getpid(), os.getppid()),))
    assert both.pick() is both.instances[0]


def test_pid_flags_name_themselves_and_accept_any_pid_above_1() -> None:
    assert parse_pids("2, 37") == (2, 37)
    with pytest.raises(ValueError, match=r"^--upstream-pids 'x': give comma-separated process"):
        parse_pids("x")
    with pytest.raises(ValueError, match=r"^--judge-pids '1': give comma-separated process ids"):
        parse_pids("1", "--judge-pids")


def test_a_process_name_with_a_parenthesis_and_a_z_is_not_a_zombie() -> None:
    """/proc/PID/stat is 'pid (comm) state ...' and comm is the process's to choose: the state
    follows the LAST ')'. A server process named 'x) Z y' must not read as exited."""
    code = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'x) Z y', 0, 0, 0); "
            "print('named', flush=True); time.sleep(60)")
    named = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert named.stdout is not None and named.stdout.readline().strip() == "named"
        assert "(x) Z y)" in Path(f"/proc/{named.pid}/stat").read_text()
        assert alive(named.pid)
    finally:
        named.kill()
        named.wait()


def test_without_proc_the_kill_check_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoProc:
        def __init__(self, _path: str) -> None:
            pass

        def read_text(self) -> str:
            raise FileNotFoundError("/proc is not mounted")

    monkeypatch.setattr("hpceval.job.proxy.liveness.Path", NoProc)
    assert alive(os.getpid())
    assert not alive(2 ** 22 + 7)


def test_another_users_process_is_never_the_jobs_server() -> None:
    """kill(pid, 0) on another uid's process raises PermissionError: it exists, but the job
    did not start it. Checked as an ordinary user (here, nobody when the tests run as root)
    against pid 1, which root owns."""
    check = "from hpceval.job.proxy.liveness import alive; print(alive(1))"
    if os.geteuid() != 0:
        assert not alive(1)
        return
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to run the check as another uid")
    src = str(Path(__file__).parents[2])
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          sys.executable, "-c", check], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": src}, check=False,
                         cwd="/")
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip(f"nobody cannot read this checkout or interpreter: {out.stderr[-200:]}")
    assert out.stdout.strip() == "False", out.stderr


class _Sessions:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    def of(self, _inst: object) -> aiohttp.ClientSession:
        return self.session


async def test_a_suspect_server_is_probed_and_kept_or_put_down_by_its_health() -> None:
    """A timed-out request makes the instance suspect: /health is asked in the background; a
    server that answers stays up, one whose port is closed is down, with both reasons."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    healthy = FakeUpstream()
    async with running_upstreams(healthy) as urls, aiohttp.ClientSession() as session:
        balancer = Balancer([urls[0], f"http://127.0.0.1:{dead_port}"],
                            pids=((os.getpid(),), (os.getpid(),)))
        good, bad = balancer.instances
        for inst in (good, bad):
            balancer.suspect(inst, "request timed out", _Sessions(session))  # type: ignore[arg-type]
        for _ in range(200):
            if not balancer._tasks:
                break
            await asyncio.sleep(0.01)
        assert not balancer._tasks  # finished checks are not kept
        assert good.up and "/health" in healthy.paths
        assert not bad.up and bad.last_error == "request timed out; /health failed too"
        assert (good.failures, bad.failures) == (1, 1)


def test_an_external_api_that_answers_again_comes_back_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    balancer = Balancer(["http://api.example:1"], external=True)
    (inst,) = balancer.instances
    with caplog.at_level("WARNING"):
        balancer.mark_up(inst)  # already up: nothing to say
        assert not caplog.records
        balancer.mark_down(inst, "refused")
        balancer.mark_up(inst)
    assert inst.up and inst.down_since is None
    assert caplog.messages[-1] == "upstream http://api.example:1 is back (answered its probe)"
