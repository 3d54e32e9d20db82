"""The ps-memory tool finds a launcher's tasks, their peak memory, and the
phase of the job each memory sample was taken in."""
import datetime
import json
import os
import sys

from tools.bench.ps_memory import phases
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


def test_phases_split_the_samples_at_the_chief_s_lines():
  """Each sample falls in the phase the chief's log had started; "build"
  is taken once (evaluation builds the model again later)."""
  log = "\n".join([
      "[ps:0] I1125 10:00:00.500000 1 x.py:1] Calling model_fn.",
      "[chief:0] I1125 10:00:01.000000 1 x.py:1] Calling model_fn.",
      "[chief:0] I1125 10:00:02.000000 1 x.py:1] Graph was finalized.",
      "[chief:0] I1125 10:00:03.000000 1 x.py:1] Saving checkpoints for 0 "
      "into m/model.ckpt.",
      "[chief:0] I1125 10:00:04.000000 1 x.py:1] Calling checkpoint "
      "listeners after saving checkpoint 0...",
      "[chief:0] I1125 10:00:06.000000 1 x.py:1] Calling model_fn.",
      "[chief:0] I1125 10:00:07.000000 1 x.py:1] Starting evaluation at x",
  ])
  start = datetime.datetime(2026, 11, 25, 10, 0, 0).timestamp()
  timeline = [(start + t, {"ps:0": mib << 20, "chief:0": 1})
              for t, mib in [(1.5, 10), (2.5, 30), (3.5, 35), (5, 50),
                             (6.5, 40), (7.5, 45)]]
  by_phase = phases.peaks_by_phase(timeline, log, ["ps:0"])
  assert {phase: procs.mib(row["ps:0"]) for phase, row in
          by_phase.items()} == {"build": 10, "init": 30, "save 0": 35,
                                "steps": 50, "evaluate": 45}
