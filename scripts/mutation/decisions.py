"""What mutation testing covers: the decision modules users rely on, the unit tests that decide
each, and the audit's hand-made mutants (../shared/reviews/test-trust-2.md), kept so that each
can be rerun. One table for scripts/mutation/run.py; docs/testing.md gives the scores."""

from __future__ import annotations

from dataclasses import dataclass

_RESULTS = ("tests/results/test_stats.py", "tests/results/test_compare.py",
            "tests/results/test_gate_rules.py", "tests/results/test_paired.py",
            "tests/results/test_intervals.py", "tests/results/test_table.py",
            "tests/results/test_report.py", "tests/results/test_checkpoints.py",
            "tests/results/test_results.py", "tests/api/test_api.py")
_WALLTIME = ("tests/backends/slurm/test_partitions.py", "tests/runs/test_control.py",
             "tests/config/test_bad_configs.py", "tests/config/test_judges.py",
             "tests/render/test_site_resume.py", "tests/backends/test_backends.py",
             "tests/render/test_header.py")
_LIVENESS = ("tests/job/test_proxy_liveness.py", "tests/job/test_proxy.py",
             "tests/job/test_proxy_chaos.py", "tests/job/test_proxy_cli.py",
             "tests/job/test_proxy_hold.py", "tests/job/test_judge_successor.py",
             "tests/job/test_proxy_budget.py", "tests/job/test_proxy_peers.py")
_AUTH = ("tests/job/test_proxy_bounds.py", "tests/job/test_proxy_guard.py",
         "tests/job/test_proxy_routes.py", "tests/job/test_proxy_cli.py",
         "tests/job/test_proxy_unix.py", "tests/job/test_proxy.py",
         "tests/render/test_proxy_client_key.py")
_TRUST = ("tests/config/test_one_trust_rule.py", "tests/config/test_profile_trust.py",
          "tests/tasks/test_catalogue_trust.py", "tests/staging/test_include_path_trust.py",
          "tests/watch/test_watch_trust.py", "tests/runs/test_foreign_refs.py",
          "tests/runs/test_registry_trust.py", "tests/render/test_job_trust.py",
          "tests/render/test_sweep_judge_consumer.py", "tests/runs/test_second_user.py")
_LAYOUT = ("tests/config/test_layout.py", "tests/config/test_bad_configs.py",
           "tests/config/test_auxiliary.py", "tests/render/test_multinode_env.py",
           "tests/config/test_compose.py")
_RESUME = ("tests/runs/test_control.py", "tests/runs/test_interruptions.py",
           "tests/runs/test_task_states.py", "tests/runs/test_judge_state.py",
           "tests/runs/test_status.py", "tests/results/test_auto_export.py",
           "tests/runs/test_judge_sweep.py")
_STATES = ("tests/backends/test_backends.py", "tests/backends/slurm/test_slurm_states.py",
           "tests/backends/slurm/test_slurm_poller.py",
           "tests/backends/slurm/test_slurm_client.py", "tests/runs/test_interruptions.py",
           "tests/runs/test_status.py", "tests/backends/test_conformance.py")
_QUOTING = ("tests/render/test_quoting.py", "tests/config/test_hostile_inputs.py",
            "tests/render/test_hostile_jobs.py", "tests/config/test_bad_configs.py")
_CACHE_KEYS = ("tests/job/test_proxy_routes.py", "tests/job/test_cache.py",
               "tests/interceptors/test_interceptors.py", "tests/job/test_proxy.py")

# decision -> (its modules, the unit tests that decide them)
DECISIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "paired statistics": (("hpceval/results/paired.py", "hpceval/results/stats.py"), _RESULTS),
    "gate": (("hpceval/results/gate.py",), (*_RESULTS, "tests/cli/test_cli.py")),
    "newest-run choice": (("hpceval/results/table.py",), _RESULTS),
    "walltime and partition limits": (("hpceval/backends/slurm/formats.py",
                                       "hpceval/backends/slurm/partitions.py"), _WALLTIME),
    "proxy liveness": (("hpceval/job/proxy/liveness.py", "hpceval/job/proxy/balancer.py"),
                       _LIVENESS),
    "proxy authentication": (("hpceval/job/proxy/guard.py",), _AUTH),
    "trust": (("hpceval/trust.py",), _TRUST),
    "layout": (("hpceval/config/layout.py",), _LAYOUT),
    "resume": (("hpceval/runs/state.py",), _RESUME),
    "Slurm state mapping": (("hpceval/backends/slurm/states.py",), _STATES),
    "quoting": (("hpceval/shell.py", "hpceval/render/quoting.py"), _QUOTING),
    "cache keys": (("hpceval/job/interceptors.py",), _CACHE_KEYS),
}


@dataclass(frozen=True)
class Mutant:
    """One plausible one-line bug: `old` (exactly once in `path`) becomes `new`."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    breaks: str


AUDIT: tuple[Mutant, ...] = (
    Mutant("M1", "hpceval/results/paired.py", "min(a_only, b_only), total, 0.5)",
           'min(a_only, b_only), total, 0.5, alternative="less")', _RESULTS,
           "McNemar one-sided: p-values halved"),
    Mutant("M2", "hpceval/results/paired.py", "(wb.high - p_b) ** 2 - 2 * phi",
           "(wb.high - p_b) ** 2 + 2 * phi", _RESULTS,
           "Newcombe's phi term with the wrong sign in the upper half-width"),
    Mutant("M3", "hpceval/results/stats.py", "running = max(running, min(1.0, (m - rank) * "
           "pvalues[i]))", "running = min(1.0, (m - rank) * pvalues[i])", _RESULTS,
           "Holm without its step-down maximum"),
    Mutant("M4", "hpceval/results/gate.py",
           "return NO_GO if NO_GO in found else INCONCLUSIVE if INCONCLUSIVE in found else GO",
           "return INCONCLUSIVE if INCONCLUSIVE in found else NO_GO if NO_GO in found else GO",
           (*_RESULTS, "tests/cli/test_cli.py"), "gate: INCONCLUSIVE outranks NO-GO"),
    Mutant("M4b", "hpceval/results/gate.py", "rule.alpha / m)", "rule.alpha)",
           (*_RESULTS, "tests/cli/test_cli.py"), "gate without the Bonferroni division"),
    Mutant("M5", "hpceval/results/table.py", 'keep="last"', 'keep="first"', _RESULTS,
           "the oldest run of a model/task counts"),
    Mutant("M6", "hpceval/backends/slurm/formats.py", "return -(-seconds // 60)",
           "return seconds // 60", _WALLTIME, "walltime minutes rounded down"),
    Mutant("M7", "hpceval/job/proxy/forward.py",
           "if not self.balancer.still_launched(inst):\n                    return _lost(inst)  #",
           "if not inst.up:\n                    return _lost(inst)  #", _LIVENESS,
           "a late answer from a dead server's port passed on"),
    Mutant("M8", "hpceval/job/proxy/liveness.py", "return all(alive(p) for p in pids)",
           "return any(alive(p) for p in pids)", _LIVENESS,
           "a multi-node instance whose head died stays trusted"),
    Mutant("M9", "hpceval/job/proxy/server.py",
           "if path not in guard.KEYLESS and not self._authorized(request):",
           "if path in CACHED_PATHS and not self._authorized(request):", _AUTH,
           "the job key required on the cached routes only"),
    Mutant("M10", "hpceval/trust.py", "for folder in real.parents:",
           "for folder in real.parents[:1]:", _TRUST,
           "only the file's own folder checked for write bits"),
    Mutant("M11", "hpceval/config/layout.py",
           "dep.data_parallel_size != layout.instances",
           "dep.data_parallel_size > layout.instances", _LAYOUT,
           "a too-small data_parallel_size silently retiled"),
    Mutant("M12", "hpceval/runs/state.py", "bool(model.tasks) and all(",
           "bool(model.tasks) and any(", _RESUME,
           "resume skips a half-done model"),
    Mutant("M13", "hpceval/backends/slurm/backend.py",
           'startswith(("PREEMPTED", "NODE_FAIL"))', 'startswith("PREEMPTED")', _STATES,
           "a NODE_FAIL job cached: requeued, it reads FAILED forever"),
    Mutant("M14", "hpceval/shell.py", "[A-Za-z0-9_]*$", "[A-Za-z0-9_]*", _QUOTING,
           "env-var names without the end anchor"),
    Mutant("M15", "hpceval/job/interceptors.py", "request_key(path, body, chain.key_chain)",
           "request_key(path, body)", _CACHE_KEYS, "cache key without the interceptor chain"),
    # The template environment is built once (lru_cache) before mutmut switches a mutant on,
    # so its mutants "survive" mutmut whatever the tests do; these two show the tests do.
    Mutant("M16", "hpceval/render/quoting.py", "trim_blocks=True", "trim_blocks=False",
           (*_QUOTING, "tests/render/test_golden.py"),
           "templates rendered with Jinja's block newlines left in"),
    Mutant("M17", "hpceval/render/quoting.py", "autoescape=False", "autoescape=True",
           (*_QUOTING, "tests/render/test_golden.py"), "shell quoting HTML-escaped"),
)
