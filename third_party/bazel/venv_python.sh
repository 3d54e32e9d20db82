#!/usr/bin/env bash
# The Python interpreter Bazel runs every py_binary / py_test with: the project's
# .venv (made by tools/rig/setup_env.sh), which has TensorFlow, Horovod and pytest.
#
# Bazel puts this script into each target's runfiles as a chain of symlinks that
# ends at the source tree, so resolving our own path finds the workspace and its
# .venv without any absolute path in the build files. ESTIMATOR_SCALE_PYTHON
# (passed with --test_env / --action_env) overrides it.
set -euo pipefail
if [[ -n "${ESTIMATOR_SCALE_PYTHON:-}" ]]; then
  exec "$ESTIMATOR_SCALE_PYTHON" "$@"
fi
self="$(readlink -f "${BASH_SOURCE[0]}")"
workspace="$(cd "$(dirname "$self")/../.." && pwd)"
python="$workspace/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  echo "venv_python.sh: $python not found; run 'bash tools/rig/setup_env.sh' first" >&2
  exit 127
fi
exec "$python" "$@"
