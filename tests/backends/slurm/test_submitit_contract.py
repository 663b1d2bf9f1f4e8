"""What SacctPoller takes from submitit's SlurmInfoWatcher, pinned (pyproject: submitit <1.6).

The poller overrides `update` and `update_if_long_enough` (docs/controller.md says why) and
keeps submitit's registration, finished set, call count, `get_info` / `get_state` and `clear`.
Those are private attributes of submitit's, so a new submitit release that renames them would
break status silently: this test names each one, and fails first.
"""

from __future__ import annotations

import inspect

from submitit.core.core import InfoWatcher
from submitit.slurm.slurm import SlurmInfoWatcher
from support.slurm import FakeSlurm

from hpceval.backends.slurm.poller import SacctPoller

# the attributes the poller reads or writes that submitit's __init__ creates
INHERITED_STATE = ("_registered", "_finished", "_info_dict", "_num_calls", "_last_status_check")
# submitit's methods the poller calls or leaves callers to call, unchanged
INHERITED_METHODS = ("get_info", "get_state", "register_job", "clear", "num_calls")
# the two hooks the poller replaces (and no others of submitit's)
OVERRIDDEN = {"update", "update_if_long_enough", "is_done", "register_job", "clear"}


def test_submitit_creates_the_state_the_poller_uses() -> None:
    watcher = SlurmInfoWatcher(delay_s=1)
    for name in INHERITED_STATE:
        assert hasattr(watcher, name), f"submitit's watcher has no {name} any more"
    for name in INHERITED_METHODS:
        assert hasattr(SlurmInfoWatcher, name), f"submitit's watcher has no {name} any more"


def test_the_poller_overrides_only_the_hooks_docs_name() -> None:
    ours = {name for name, member in vars(SacctPoller).items()
            if callable(member) or isinstance(member, property)}
    theirs = {name for name, _ in inspect.getmembers(SlurmInfoWatcher) if not name.startswith("__")}
    assert ours & theirs == OVERRIDDEN
    # the one call submitit's own update makes is never reached: ours replaces it whole
    assert SacctPoller.update is not InfoWatcher.update


def test_submitits_get_state_reads_what_the_poller_recorded() -> None:
    fake = FakeSlurm()
    poller = SacctPoller(fake, min_interval_s=0)
    job = "4242"
    fake.states[job] = "RUNNING"
    poller.register(job)
    poller.update()
    # submitit's own reader, unchanged, over the info dict the poller fills
    assert poller.get_state(job, mode="cache") == "RUNNING"
    assert poller.num_calls == 1 and job in poller._registered
