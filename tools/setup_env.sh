#!/usr/bin/env bash
# Makes .venv with the pinned stack. A second run checks a stamp of the pins and
# returns in seconds; Horovod is built from source only when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
VENV=.venv
PINS="tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0 keras==2.15.0 numpy<2 absl-py>=2 scikit-learn matplotlib pytest"
HOROVOD_PIN="horovod==0.28.1"
STAMP="$VENV/.stack-stamp"
WANT="$(printf '%s\n' "$PINS" "$HOROVOD_PIN" "$(cat setup.py 2>/dev/null | sha1sum)")"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup: $VENV is up to date"
  exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade "pip<25" "setuptools<70" wheel
# shellcheck disable=SC2086
"$VENV/bin/pip" install -q $PINS
if ! "$VENV/bin/python" -c "import horovod.tensorflow" 2>/dev/null; then
  echo "setup: building $HOROVOD_PIN from source with Gloo (3-5 minutes on 2 cores)"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo \
  MAKEFLAGS=-j"$(nproc)" \
    "$VENV/bin/pip" install -q --no-build-isolation --no-cache-dir "$HOROVOD_PIN"
fi
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/horovodrun" --check-build | grep -q "\[X\] Gloo"
printf '%s' "$WANT" > "$STAMP"
echo "setup: $VENV ready"
