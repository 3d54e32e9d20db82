#!/usr/bin/env bash
# Builds every target and runs every Bazel test of the workspace, offline.
#
#   bash tools/bazel_test.sh                      # bazel test //...
#   bash tools/bazel_test.sh //tests:test_foo     # just these targets
#   BAZEL_ARGS="--test_filter=adascale" bash tools/bazel_test.sh
#   BAZEL_BUILD_ONLY=1 bash tools/bazel_test.sh   # build every target, run none
#
# Installs Debian's bazel-bootstrap (Bazel 4.2.3) when `bazel` is missing, makes
# sure .venv exists (tools/rig/setup_env.sh; a no-op when it is up to date), then runs
# `bazel test`. Every py_test runs on .venv/bin/python through the toolchain that
# .bazelrc registers (third_party/bazel/venv_python.sh), so plain `bazel test
# //...` does the same; --python_path is ignored by Bazel 4 while Python
# toolchains are on. WORKSPACE overrides every repository Bazel would download,
# so nothing is fetched; see third_party/bazel/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bazel >/dev/null 2>&1; then
  echo "bazel_test: installing Debian's bazel-bootstrap"
  SUDO=""
  [[ "$(id -u)" == 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bazel-bootstrap >/dev/null
fi

bash tools/rig/setup_env.sh

# Sized for small machines (2 cores): TensorFlow tests are CPU- and memory-heavy,
# so two test processes at a time.
JOBS="${BAZEL_JOBS:-$(nproc)}"
TEST_JOBS="${BAZEL_TEST_JOBS:-2}"

# The venv lives outside Bazel's view: tie cached test results to its stamp, so
# a change of the pinned stack reruns the tests.
VENV_STAMP="$(sha1sum < .venv/.stack-stamp | cut -c1-16)"

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(//...)

# BAZEL_BUILD_ONLY=1 builds every target (the test binaries included) and runs
# none: a quick check of the BUILD files (CI runs the tests as well).
if [[ -n "${BAZEL_BUILD_ONLY:-}" ]]; then
  # shellcheck disable=SC2086
  exec bazel build --jobs="$JOBS" --show_progress_rate_limit=30 ${BAZEL_ARGS:-} \
    -- "${targets[@]}"
fi
# shellcheck disable=SC2086
exec bazel test \
  --test_output=errors \
  --jobs="$JOBS" \
  --local_test_jobs="$TEST_JOBS" \
  --test_env=ESTIMATOR_SCALE_VENV_STAMP="$VENV_STAMP" \
  --test_env=ESTIMATOR_SCALE_DATA="${ESTIMATOR_SCALE_DATA:-$HOME/.cache/estimator_scale}" \
  --show_progress_rate_limit=30 \
  ${BAZEL_ARGS:-} \
  -- "${targets[@]}"
