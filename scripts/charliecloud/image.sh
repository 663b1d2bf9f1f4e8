#!/usr/bin/env bash
# image.sh - images as Charliecloud runs them on compute nodes: SquashFS files (the staged form of
# container_runtime charliecloud; ch-run mounts one with squashfuse), for the Slurm jobs of
# tests/integration/test_charliecloud_job.py.
#
#   bash scripts/charliecloud/image.sh harness VENV [FOLDER...]   # lm_eval from VENV's packages
#   bash scripts/charliecloud/image.sh server VENV [FOLDER...]    # vllm from VENV's packages
#   (prints the .sqfs file's path; FOLDERs: more mount points the jobs bind onto, as a model's)
#
# One image flow for both: the root filesystem of the podman harness image (scripts/podman/
# harness-image.sh builds it: Debian minbase + Debian's python3.11, nothing of hpceval's),
# exported from podman's store, given one entry program, and packed with mksquashfs. The
# packages are VENV's site-packages, bound read-only at run time (execution.extra_binds), on
# the PYTHONPATH of the image's ENV (/ch/environment).
# Content-hashed: the file's name is the hash of this script, the role, the site-packages path,
# the FOLDERs and the podman image's tag, so a machine builds each once (about 15 s once the podman
# image exists), in $HPCEVAL_CH_IMAGE_DIR (the site's scratch, $SLURM_SCRATCH/hpceval-charliecloud,
# where a site stages images: every node and every user of the dev cluster reads it; a node's
# /var/tmp is its own).
set -euo pipefail
usage="usage: image.sh harness|server VENV [FOLDER...]"
ROLE=${1:?$usage}
VENV=$(cd "${2:?$usage}" && pwd)
shift 2
MOUNTS=("$@")
DIR=${HPCEVAL_CH_IMAGE_DIR:-${SLURM_SCRATCH:-/srv/scratch}/hpceval-charliecloud}
case $ROLE in
  harness) ENTRY=lm_eval MODULE=lm_eval PACKAGES=() ;;
  # vLLM's CPU build links libnuma (vllm._C) and compiles with g++ at run time (torch's
  # inductor, even with --enforce-eager: g++, Python.h, and openssl to hash), as vLLM's own CPU
  # image has them
  server) ENTRY=vllm MODULE=vllm.entrypoints.cli.main PACKAGES=(libnuma1 g++ python3.11-dev openssl) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# the rootfs only: podman's harness image is built from the project venv's site-packages path,
# which does not matter here (this image binds VENV's)
TAG=$(bash "$HERE/../podman/harness-image.sh" "${HPCEVAL_VENV:-$HERE/../../.venv}")
hash=$({ cat "${BASH_SOURCE[0]}"; echo "$ROLE $SITE ${MOUNTS[*]} ${PACKAGES[*]} $TAG"; } | sha256sum | cut -c1-12)
OUT=$DIR/$ROLE-$hash.sqfs

mkdir -p "$DIR"
chmod 755 "$DIR"
exec 9>"$DIR/.lock"  # one build at a time on a shared machine
flock -w 900 9 || { echo "another build holds $DIR/.lock" >&2; exit 1; }
if [ -s "$OUT" ]; then
  echo "image $OUT: up to date" >&2
  echo "$OUT"
  exit 0
fi
t=$(date +%s)
work=$(mktemp -d /var/tmp/hpceval-chroot.XXXXXX)
cid=""
trap 'rm -rf "$work"; [ -z "$cid" ] || podman rm -f "$cid" >/dev/null 2>&1 || true' EXIT
cid=$(podman create "$TAG" /bin/true)
mkdir "$work/rootfs"
podman export "$cid" | tar -C "$work/rootfs" -x
# ch-run 0.31 (Debian 12's) binds only onto folders the image has (it cannot make one in a
# read-only image; --write-fake came in 0.32): the usual ones, and the site-packages path the
# jobs bind in, and the FOLDERs: the tests' runs are on the site's scratch, whose top folder
# they bind first (ch-run binds the node's /tmp whole).
mkdir -p "$work/rootfs"/{dev,proc,sys,tmp,home,mnt,run} "$work/rootfs$SITE"
if [ ${#PACKAGES[@]} -gt 0 ]; then  # Debian's packages, installed by the image's own apt
  cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
  chroot "$work/rootfs" apt-get update -qq >&2
  chroot "$work/rootfs" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >&2
  chroot "$work/rootfs" apt-get clean
  rm -rf "$work/rootfs/var/lib/apt/lists/"*
fi
for folder in "${MOUNTS[@]}"; do mkdir -p "$work/rootfs$folder"; done
# ch-run binds the node's /etc/hosts and /etc/resolv.conf onto the image's, but only where the
# image has them; podman export leaves them out (podman makes them per container). Without
# them no node name resolves inside, and a server across nodes waits for its peers for ever.
: > "$work/rootfs/etc/hosts"
: > "$work/rootfs/etc/resolv.conf"
# the image's ENV as Charliecloud keeps it (ch-image writes /ch/environment; hpceval's ch-run
# line applies it with a bare --set-env, and ch-run refuses an image without the file)
mkdir -p "$work/rootfs/ch"
printf 'PATH=/usr/local/bin:/usr/bin:/bin\nPYTHONPATH=%s\n' "$SITE" > "$work/rootfs/ch/environment"
rm -f "$work/rootfs/usr/local/bin/lm_eval"
printf '#!/bin/sh\nexec python3.11 -m %s "$@"\n' "$MODULE" > "$work/rootfs/usr/local/bin/$ENTRY"
chmod 755 "$work/rootfs/usr/local/bin/$ENTRY"
mksquashfs "$work/rootfs" "$work/image.sqfs" -noappend -no-progress -quiet -comp gzip >&2
chmod 644 "$work/image.sqfs"
mv "$work/image.sqfs" "$OUT"  # whole or not at all: a reader never sees half a file
# older builds of this role (other hashes), unused for an hour, go: each is ~110 MB
find "$DIR" -maxdepth 1 -name "$ROLE-*.sqfs" ! -name "${OUT##*/}" -mmin +60 -delete
echo "image $OUT: built in $(( $(date +%s) - t )) s ($(du -h "$OUT" | cut -f1))" >&2
echo "$OUT"
