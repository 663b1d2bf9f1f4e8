#!/usr/bin/env bash
# harness-image.sh - a small podman image for harnesses run in a container (the local podman
# test, tests/integration/test_podman_job.py).
#
#   bash scripts/podman/harness-image.sh VENV     # prints the image name (localhost/...)
#
# A Debian bookworm minbase root filesystem (debootstrap) holding Debian's own python3.11 and
# nothing of hpceval's. The harness packages (lm-eval and its dependencies) are VENV's
# site-packages, bound READ-ONLY into the container at run time (execution.extra_binds) and on
# PYTHONPATH (set in the image); `lm_eval` on the image's PATH runs `python3.11 -m lm_eval`.
# So the container has its own filesystem, Python, environment (only what -e passes) and
# process tree; only the pure-Python and manylinux packages come from the host, unchanged.
# No registry: `podman import` of the tarball. Content-hashed: the tag is the hash of this
# script, the site-packages path and its lm-eval version, so a machine builds it once (about
# 3 minutes and 260 MB the first time: debootstrap downloads from the Debian mirror,
# HPCEVAL_DEBIAN_MIRROR overrides it); later calls only check `podman image exists`.
set -euo pipefail
VENV=$(cd "${1:?usage: harness-image.sh VENV}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
MIRROR=${HPCEVAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LM_EVAL=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("lm-eval"))')
hash=$({ cat "$SELF"; echo "$SITE lm-eval==$LM_EVAL"; } | sha256sum | cut -c1-12)
TAG=localhost/hpceval-harness:$hash

exec 9>/tmp/hpceval-podman-image.lock  # one build at a time on a shared machine
flock -w 900 9 || { echo "another build holds /tmp/hpceval-podman-image.lock" >&2; exit 1; }
if podman image exists "$TAG"; then
  echo "image $TAG: up to date" >&2
  echo "$TAG"
  exit 0
fi
t=$(date +%s)
work=$(mktemp -d /var/tmp/hpceval-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase --include=python3.11 bookworm "$work/rootfs" "$MIRROR" >&2
printf '#!/bin/sh\nexec python3.11 -m lm_eval "$@"\n' > "$work/rootfs/usr/local/bin/lm_eval"
chmod 755 "$work/rootfs/usr/local/bin/lm_eval"
tar -C "$work/rootfs" -c . | podman import --change "ENV PYTHONPATH=$SITE" \
  --change "ENV PATH=/usr/local/bin:/usr/bin:/bin" - "$TAG" >&2
echo "image $TAG: built in $(( $(date +%s) - t )) s ($(du -sh "$work/rootfs" | cut -f1) unpacked)" >&2
echo "$TAG"
