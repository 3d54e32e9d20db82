#!/usr/bin/env bash
# Builds Horovod (constraints.txt's pin) from source, with Gloo, for
# TensorFlow, with third_party/horovod's patches, and installs it into the
# environment of a Python (default: the project's .venv). The one recipe for
# the project's setup (tools/rig/setup_env.sh) and for a venv of your own:
#
#   bash tools/rig/build_horovod.sh /path/to/venv/bin/python
#
# That environment needs TensorFlow 2.15 and pip; the machine a C++ compiler
# and cmake. 3-5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-.venv/bin/python}"
CONSTRAINTS="$PWD/constraints.txt"
HOROVOD_PIN="$(grep -E '^horovod==' "$CONSTRAINTS")"
# Applied to Horovod's sdist before it is built, in name order; see each
# patch's header. Every *.patch there is one: setup_env.sh sums the same set.
HOROVOD_PATCHES=("$PWD"/third_party/horovod/*.patch)

# A wheel built once is kept, named by everything that changes the build (the
# pin, the patches, Python's and TensorFlow's versions), so a fresh clone on a
# machine that built it before installs it in seconds instead of compiling.
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/estimator_scale/horovod-wheels"
BUILD_KEY="$("$PY" -c 'import sys, tensorflow as tf; print(f"py{sys.version_info[0]}{sys.version_info[1]}-tf{tf.__version__}")' 2>/dev/null)"
BUILD_KEY="$HOROVOD_PIN-$(cat "${HOROVOD_PATCHES[@]}" | sha1sum | cut -c1-12)-$BUILD_KEY"
SRC_DIR="$(mktemp -d)"
trap 'rm -rf "$SRC_DIR"' EXIT
if compgen -G "$WHEEL_CACHE/$BUILD_KEY/horovod-*.whl" > /dev/null; then
  echo "build_horovod: $HOROVOD_PIN with ${HOROVOD_PATCHES[*]}, built before ($WHEEL_CACHE/$BUILD_KEY)"
  "$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL_CACHE/$BUILD_KEY"/horovod-*.whl
  "$PY" -m pip install -q -c "$CONSTRAINTS" "$WHEEL_CACHE/$BUILD_KEY"/horovod-*.whl
  exit 0
fi
echo "build_horovod: $HOROVOD_PIN from source with Gloo and ${HOROVOD_PATCHES[*]}"
"$PY" -m pip download -q --no-deps --no-binary :all: "$HOROVOD_PIN" -d "$SRC_DIR"
tar -xzf "$SRC_DIR"/horovod-*.tar.gz -C "$SRC_DIR"
# Outside a git repository git apply works like patch -p1 and refuses a patch
# that does not apply cleanly; the ceiling keeps it from finding one above
# the sdist (inside a repository it would skip paths outside the current dir).
(cd "$SRC_DIR"/horovod-*/ && GIT_CEILING_DIRECTORIES="$SRC_DIR" \
   git apply --verbose "${HOROVOD_PATCHES[@]}")
# Horovod's build imports the environment's TensorFlow, hence no isolation.
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo \
MAKEFLAGS=-j"$(nproc)" \
  "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir \
    -w "$SRC_DIR/dist" "$SRC_DIR"/horovod-*/
# Built first and swapped in at once: a Horovod already there (the same
# version, unpatched) stays usable during the build. The second install only
# adds Horovod's dependencies where they are missing (a fresh venv).
"$PY" -m pip install -q --force-reinstall --no-deps "$SRC_DIR"/dist/horovod-*.whl
"$PY" -m pip install -q -c "$CONSTRAINTS" "$SRC_DIR"/dist/horovod-*.whl
mkdir -p "$WHEEL_CACHE/$BUILD_KEY.partial"
cp "$SRC_DIR"/dist/horovod-*.whl "$WHEEL_CACHE/$BUILD_KEY.partial/"
rm -rf "$WHEEL_CACHE/$BUILD_KEY"
mv "$WHEEL_CACHE/$BUILD_KEY.partial" "$WHEEL_CACHE/$BUILD_KEY"
