"""Which key a harness sends and which key the in-job proxy asks its clients for: one rule.

The in-job proxy answers only its own job (review F3: any uid on the node used the model, read
cached answers by replaying requests and pushed the job's progress). So the model's proxy asks
every client for a key, checked before a byte of the body is read:

- the endpoint's own key, where it has one (`target.api_endpoint.api_key_name`): the harness
  sends it as before, and the proxy passes it on (an external API) or sends the job's token in
  its place (the job's own servers);
- else the per-job client key (`CLIENT_TOKEN`: 32 random bytes made in the job, on no command
  line and in no file), which the harness gets in its environment as `HARNESS_KEY`: what
  lm-eval's local-(chat-)completions send, and the variable eval-factory images are told to read
  (`--api_key_name`). A harness of one's own reads `$OPENAI_API_KEY` and sends it as
  `Authorization: Bearer ...` (docs/tasks.md). It is not the token the job's servers take
  (`JOB_TOKEN`, which only the proxies send): a process that takes the proxy's port after the
  proxy has died receives the client key from a harness for up to a second before the job
  stops the tasks, and that key opens nothing (shared-cluster-4, its audit of F1).

A harness that calls an external endpoint directly (`proxy: false`) gets only the endpoint's key.

Each judge (auxiliary deployment) has a proxy of its own, on a port of the job's block that
anyone on the node can reach: it asks for a key by the same rule (the judge's own
`api_key_name`, else the job's client key), which the tasks get as `<PREFIX>_API_KEY` (JUDGE_API_KEY
for a judge named judge: what the shipped judged_qa sends) and `HPCEVAL_AUX_<NAME>_API_KEY`,
unless a task sets that variable or names it in its required_env (a judge it calls itself).

A proxy that asks its clients for a key never forwards their Authorization header: its
upstreams get the key named for them or none (the job's token must not reach an external API).
"""

from __future__ import annotations

from hpceval.config.auxiliary import env_prefix, job_variable
from hpceval.config.schema import AuxiliaryDeploymentSpec, RunSpec
from hpceval.engines import engine_for

JOB_TOKEN = "HPCEVAL_JOB_TOKEN"  # the job's servers take it; only its proxies send it
CLIENT_TOKEN = "HPCEVAL_CLIENT_TOKEN"  # the job's proxies ask their clients (harnesses) for it
HARNESS_KEY = "OPENAI_API_KEY"


def through_proxy(spec: RunSpec) -> bool:
    """Whether the harnesses reach the model through the in-job proxy."""
    ep = spec.target.api_endpoint
    return engine_for(spec.deployment.type).serves or (ep.url is not None and ep.proxy)


def proxy_client_key(spec: RunSpec) -> str:
    """The variable holding the key the model's proxy asks its clients for."""
    return spec.target.api_endpoint.api_key_name or CLIENT_TOKEN


def proxy_upstream_key(spec: RunSpec, servers_take_token: bool) -> str:
    """The variable holding the key the model's proxy sends its upstreams ('' for none): the
    job's token to servers that require it, an external endpoint's own key to that endpoint."""
    if servers_take_token:
        return JOB_TOKEN
    serves = engine_for(spec.deployment.type).serves
    return "" if serves else spec.target.api_endpoint.api_key_name or ""


def judge_client_key(aux: AuxiliaryDeploymentSpec) -> str:
    """The variable holding the key a judge's proxy asks its clients for."""
    return aux.api_key_name or CLIENT_TOKEN


def judge_keys(spec: RunSpec) -> list[tuple[str, str]]:
    """(variable a task reads, job variable it is set from) for each judge's proxy key: NeMo
    Evaluator's `<PREFIX>_API_KEY` and ours, `HPCEVAL_AUX_<NAME>_API_KEY` (as for its URLs)."""
    return [(variable, judge_client_key(aux))
            for name, aux in spec.auxiliary_deployments.items()
            for variable in (f"{env_prefix(name, aux)}_API_KEY", job_variable(name, "api_key"))]


def harness_key(spec: RunSpec) -> str | None:
    """The variable the harness reads its API key from (the command templates' `api_key_env`)."""
    own = spec.target.api_endpoint.api_key_name
    return own or (HARNESS_KEY if through_proxy(spec) else None)


def harness_key_value(spec: RunSpec) -> str | None:
    """The job variable `HARNESS_KEY` is set from, when the harness gets the job's client key
    (the one the model's proxy asks for)."""
    return proxy_client_key(spec) if harness_key(spec) == HARNESS_KEY and not \
        spec.target.api_endpoint.api_key_name else None
