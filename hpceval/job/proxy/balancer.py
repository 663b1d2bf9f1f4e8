"""Least-outstanding-requests balancing over model server instances, with down-marking and re-probe.

An instance that refuses connections is marked down at once and skipped. One whose request
timed out or whose connection dropped is only *suspected*: a slow but healthy vLLM under load
(or a keep-alive connection it was closing) must not be taken out of rotation, so it is marked
down only if its /health also fails.

An instance the job launched is down for good once marked down, and at once when a process the
job started for it has exited (`proxy.liveness`): a 200 on its port may come from another uid
that took the port (review F1), and the job token must never go there. Only an API outside the
job (`external`) is re-probed in the background and put back when it answers.

A job's own server that is suspected is *held* for SETTLE_S first: no request and no probe
goes to its port until then. A killed server drops its connections a moment before its step
ends (the step's supervisor kills what it left and exits; the srun the proxy watches follows):
asked at once, its port could already answer for another uid that bound it (shared-cluster-4
F1(c): 19 of 30 answers). After the hold the pid check decides, and only a server whose step
still runs is probed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from hpceval.job.proxy.instance import Instance
from hpceval.job.proxy.liveness import all_alive

if TYPE_CHECKING:
    from hpceval.job.proxy.sessions import Sessions

log = logging.getLogger(__name__)

EXITED = "its server process exited; not trusting its port again"

PROBE_TIMEOUT_S = 5.0
SETTLE_S = 2.0  # how long a suspected server of the job's own is held (module doc)


class Balancer:
    """Picks instances; `release` must follow every `pick` that returned an instance."""

    def __init__(self, urls: tuple[str, ...] | list[str], external: bool = False,
                 pids: tuple[tuple[int, ...], ...] = ()) -> None:
        self.instances = [Instance(u, pids[i] if i < len(pids) else ())
                          for i, u in enumerate(urls)]
        self.external = external  # an API outside the job: probed without /health
        self._next = 0  # rotating start, so ties do not all land on the first instance
        self._tasks: set[asyncio.Task[None]] = set()

    def pick(self) -> Instance | None:
        best: Instance | None = None
        n = len(self.instances)
        start = self._next
        self._next = (start + 1) % n
        for i in range(n):
            inst = self.instances[(start + i) % n]
            if inst.up and not self.still_launched(inst):
                continue
            if inst.up and (best is None or inst.outstanding < best.outstanding):
                best = inst
        if best is not None:
            best.outstanding += 1
        return best

    def release(self, inst: Instance, ok: bool) -> None:
        inst.outstanding -= 1
        if ok:
            inst.done += 1

    def still_launched(self, inst: Instance) -> bool:
        """False (and down for good) once a process the job started for `inst` has exited:
        whatever answers on its port now is not the job's server."""
        if not inst.pids or all_alive(inst.pids):
            return True
        inst.failures += 1
        self._set_down(inst, EXITED)
        return False

    def any_up(self) -> bool:
        return any(i.up for i in self.instances)

    def mark_down(self, inst: Instance, reason: str) -> None:
        inst.failures += 1
        self._set_down(inst, reason)

    def _set_down(self, inst: Instance, reason: str) -> None:
        inst.last_error = reason
        if inst.up:
            inst.up = False
            inst.down_since = time.time()
            log.warning("upstream %s marked down: %s", inst.url, reason)

    def mark_up(self, inst: Instance) -> None:
        if not self.external:  # a job's own server never comes back (see the module doc)
            return
        if not inst.up:
            log.warning("upstream %s is back (answered its probe)", inst.url)
        inst.up = True
        inst.down_since = None

    def suspect(self, inst: Instance, reason: str, sessions: Sessions) -> None:
        """A request to `inst` timed out: check /health in the background, mark down if it fails."""
        if not self.still_launched(inst):  # its server is gone: nothing to ask its port
            return
        inst.failures += 1
        inst.last_error = reason
        if not self.external:
            inst.held_until = max(inst.held_until, time.monotonic() + SETTLE_S)
        if inst.up and not inst.probing:
            self._spawn(self._check_suspect(inst, reason, sessions))

    async def settled(self, inst: Instance) -> bool:
        """Whether `inst` may be asked now: after its hold (SETTLE_S), if any, its processes
        must still run."""
        wait = inst.held_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
            return self.still_launched(inst)
        return True

    def down_reason(self) -> str:
        parts = [f"{i.url} ({i.last_error or 'down'})" for i in self.instances if not i.up]
        return f"all {len(self.instances)} upstream instances are down: " + "; ".join(parts)

    def snapshot(self) -> list[dict[str, Any]]:
        return [i.snapshot() for i in self.instances]

    async def probe(self, inst: Instance, sessions: Sessions) -> bool:
        inst.probing = True
        try:
            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            path = "/v1/models" if self.external else "/health"
            async with sessions.of(inst).get(inst.base + path, timeout=timeout) as resp:
                await resp.read()
                # An external API answers the probe without a key with 401: still reachable.
                return resp.status < 500 if self.external else resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False
        finally:
            inst.probing = False

    async def run_prober(self, sessions: Sessions, interval: float) -> None:
        """Forever: re-probe the instances that are down (cancelled at shutdown); external
        upstreams only: the job's own servers are down for good."""
        while self.external:
            await asyncio.sleep(interval)
            down = [i for i in self.instances if not i.up and not i.probing]
            try:
                results = await asyncio.gather(*(self.probe(i, sessions) for i in down))
            except Exception:  # if this loop died, a down instance would never come back
                log.exception("health probe failed unexpectedly")
                continue
            for inst, ok in zip(down, results, strict=True):
                if ok:
                    self.mark_up(inst)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _check_suspect(
        self, inst: Instance, reason: str, sessions: Sessions
    ) -> None:
        inst.probing = True  # (no second check meanwhile)
        try:
            if not await self.settled(inst):
                return  # its server exited: down for good, its port never asked
        finally:
            inst.probing = False
        answered = await self.probe(inst, sessions)
        # A SIGKILLed server resets its connections a moment before it is a zombie: gone by
        # now, that is why (whatever its port said), not the failed probe.
        if self.still_launched(inst) and not answered:
            self._set_down(inst, f"{reason}; /health failed too")

    def _spawn(self, coro: Any) -> None:
        # Keep a reference: the event loop holds tasks only weakly.
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
