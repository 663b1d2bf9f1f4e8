#!/usr/bin/env bash
# mutation.sh - mutation testing of hpceval's decision modules (issue 39; docs/testing.md).
#
#   bash scripts/mutation.sh audit [M1 ... M15]    # rerun the audit's hand-made mutants (~6 min)
#   bash scripts/mutation.sh score [DECISION ...]  # mutmut over the decision modules
#   bash scripts/mutation.sh score --survivors     # ... and print each survivor's diff
#
# Not part of .ci/run (it takes minutes). Run it before a release and whenever you change a
# decision module (scripts/mutation/decisions.py lists them with their tests), and give the
# scores in your closing note. It uses the project venv (.venv, or HPCEVAL_VENV) made by
# scripts/run-tests.sh, adding the `mutation` extra (mutmut, pinned) when it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${HPCEVAL_VENV:-$PWD/.venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "mutation.sh: no venv at $VENV; run 'bash scripts/run-tests.sh -m \"not slurm\"' first" >&2
  exit 2
fi
"$VENV/bin/python" -c 'import mutmut' 2>/dev/null \
  || "$VENV/bin/python" -m pip install -q -e '.[test,mutation]' </dev/null
exec "$VENV/bin/python" scripts/mutation/run.py "$@"
