"""The ps-memory tool finds a launcher's tasks and their peak memory."""
import json
import os
import sys

from tools.bench.ps_memory import procs


def test_watch_reads_each_task_s_peak_by_its_tf_config(tmp_path):
  """A stand-in launcher starts one "ps" child that holds 64 MiB a moment
  and one without a TF_CONFIG; only the ps child is reported, and its peak
  counts the 64 MiB it no longer holds when it exits."""
  config = json.dumps({"cluster": {"ps": ["localhost:1"]},
                       "task": {"type": "ps", "index": 0}})
  child = ("import time; b = bytearray(64 << 20); del b; time.sleep(1.5)")
  launcher = (
      "import os, subprocess, sys\n"
      f"ps = subprocess.Popen([sys.executable, '-c', {child!r}],\n"
      f"    env=dict(os.environ, TF_CONFIG={config!r}))\n"
      "other = subprocess.Popen([sys.executable, '-c', 'import time; "
      "time.sleep(1.5)'])\n"
      "ps.wait(); other.wait()\n")
  env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
  peaks, code = procs.watch([sys.executable, "-c", launcher], env,
                            str(tmp_path / "log"), every=0.1)
  assert code == 0
  assert list(peaks) == ["ps:0"], peaks
  assert procs.mib(peaks["ps:0"]) >= 64
  assert procs.peak_bytes(os.getpid()) > 0
