"""Tables larger than any host, on hosts that each have a memory ceiling.

Each of the rig's hosts is capped (tools/rig/cluster.py's limit_memory, the
cgroup v1 memory controller) below the job's tables, their optimizer slots
included, as a machine with that much memory would be; past its cap the
kernel kills the host's biggest process. The jobs run from host1 over ssh,
as on a cluster:

- Horovod, one rank on each of 4 hosts (horovodrun on a host of its own):
  a sharded table of 2^22 x 32 and a dynamic table of 2^21 x 32 with
  Adagrad (1,584 MiB of rows, slots and ids) train, save (full, then
  deltas: the dynamic table's changed rows, the sharded one whole), are
  evaluated on the ranks and exported (whole, and compact: the dynamic
  table's rows as int8), each host capped at 1,056 MiB (the tables are
  1.5x a host); the full save and a delta restore into 5 ranks on 5
  capped hosts, which re-shard, train on and evaluate; the same job with
  tables 1.2x the 4 hosts' caps together is refused before training, in
  one line per rank;
- parameter servers, a chief, a worker and 3 ps tasks on 5 hosts: a table
  of 2^23 x 32 with Adagrad (2 GiB) trains, is evaluated on the ps tasks
  and exported, each host capped at 1,400 MiB (the table is 1.46x a host,
  and twice the rows alone of the chief's).

No host is ever OOM-killed (before, the chief or rank 0 was, as it
restored every table to evaluate).
"""
import re
import shutil
import subprocess
import time

import pytest

from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, HOROVODRUN_GLOO, LAUNCH_ENV, PYTHON, finish
from tools.rig import cluster as cluster_lib

MiB = cluster_lib.MiB


def _run(host, argv, env, log, limit):
  with open(log, "w") as f:
    proc = host.popen(argv, cwd=ROOT, env=env, stdout=f,
                      stderr=subprocess.STDOUT)
  return finish(proc, log, time.monotonic() + limit)


@pytest.fixture
def scratch(tmp_path):
  """tmp_path, emptied after the test: gigabytes of checkpoints."""
  yield tmp_path
  shutil.rmtree(tmp_path, ignore_errors=True)


def _check_hosts(hosts, cap, before):
  for host in hosts:
    use = host.memory_use()
    assert not use.oom_killed_since(before[host.name]), (
        host.why_killed(137, before=before[host.name]))
    assert use.peak <= cap, (host.name, use)
  return {host.name: round(host.memory_use().peak / MiB) for host in hosts}


def _ranks_job(hosts, scratch, vocabulary, capacity, *more):
  """The Horovod job of one rank per host over `hosts`: a sharded table of
  `vocabulary` rows and a dynamic one of `capacity`, dimension 32, Adagrad,
  with the worker's flags `more` after the others."""
  return [
      *HOROVODRUN_GLOO, "-np", str(len(hosts)), "-H",
      ",".join(f"{h.name}:1" for h in hosts), PYTHON, "-m",
      "tests.workers.evaluation_on_ranks",
      f"--model_dir={scratch / 'model'}", f"--out_dir={scratch / 'out'}",
      f"--export_dir={scratch / 'export'}",
      f"--compact_export_dir={scratch / 'compact'}",
      f"--vocabulary={vocabulary}", f"--capacity={capacity}",
      "--dimension=32", "--steps=4", *more]


def _table_bytes(vocabulary, capacity):
  """Rows and Adagrad's slot of both tables, and the dynamic one's ids."""
  return (vocabulary + capacity) * 32 * 4 * 2 + capacity * 3 * 8


def test_horovod_ranks_on_hosts_capped_below_the_tables(cluster, scratch):
  # horovodrun runs on a host of its own, whose memory is not the ranks'.
  launcher, *hosts = cluster(6).hosts
  cap = 1056 * MiB
  assert _table_bytes(1 << 22, 1 << 21) >= 1.5 * cap
  for host in hosts:
    host.limit_memory(cap)
  before = {host.name: host.memory_use() for host in hosts}
  out, export = scratch / "out", scratch / "export"
  # Saves at 2 (full), 4 and 6 (deltas), and 6 again (the session's last
  # save is full).
  log = _run(launcher, _ranks_job(
      hosts[:4], scratch, 1 << 22, 1 << 21, "--steps=6",
      "--save_checkpoints_steps=2", "--full_checkpoint_every=3"), ENV,
      scratch / "log", 420)
  assert "Evaluating" in log and "on 4 Horovod ranks" in log, log[-3000:]
  tables = scratch / "model" / "sharded_tables"
  assert (tables / "deltas" / "2" / "delta-4.index").exists(), log[-3000:]
  assert len(list(out.glob("eval-rank?.json"))) == 4
  assert "Predicting from" in log, log[-3000:]  # each rank its own input
  (exported,) = list(export.iterdir())
  full = sum(f.stat().st_size for f in (exported / "variables").iterdir())
  assert full >= ((1 << 22) + (1 << 21)) * 32 * 4
  # The compact export keeps the dynamic table's 40 ids' rows, as int8.
  (compact,) = list((scratch / "compact").iterdir())
  assert sum(f.stat().st_size for f in (compact / "variables").iterdir()) \
      <= full - 0.99 * (1 << 21) * 32 * 4
  # Without step 6's saves, 5 ranks resume at step 4: the full save of
  # step 2 and the delta after it; they re-shard, train on and evaluate,
  # under the caps.
  for path in [*tables.glob("ckpt-6.*"), *tables.glob("deltas/2/delta-6.*")]:
    path.unlink()
  log = _run(launcher, _ranks_job(hosts, scratch, 1 << 22, 1 << 21,
                                  "--steps=6", "--name=five", "--export_dir=",
                                  "--compact_export_dir=",
                                  "--global_batch_size=30"),
             ENV, scratch / "log5", 420)
  assert ("and 1 delta(s) after it, to step 4 on 5 ranks" in log
          and "re-sharded from 4 to 5 ranks" in log), log[-3000:]
  assert len(list(out.glob("five-rank?.json"))) == 5
  peaks = _check_hosts(hosts, cap, before)
  print(f"peaks MiB under a {cap // MiB} MiB cap per host: {peaks}")


def test_tables_larger_than_the_whole_cluster_are_refused_before_training(
    cluster, scratch):
  """1.2x what the 4 capped hosts hold together: every rank stops at its
  capacity check, before a variable is made, naming its share, the cap and
  the cgroup file it comes from; no host is OOM-killed."""
  hosts = cluster(4).hosts
  cap = 1056 * MiB
  assert _table_bytes(1 << 24, 1 << 22) >= 1.2 * 4 * cap
  for host in hosts:
    host.limit_memory(cap)
  before = {host.name: host.memory_use() for host in hosts}
  log = scratch / "log"
  with open(log, "w") as f:
    proc = hosts[0].popen(_ranks_job(hosts, scratch, 1 << 24, 1 << 22),
                          cwd=ROOT, env=ENV, stdout=f,
                          stderr=subprocess.STDOUT)
  try:
    code = proc.wait(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  text = log.read_text()
  assert code != 0, text[-3000:]
  refusals = [line for line in text.splitlines()
              if "the model's variables do not fit" in line]
  assert refusals, text[-3000:]
  assert all(f"above the {cap / MiB:.1f} MiB a task may hold (this task's "
             "memory cgroup limit, " in line and "add ranks" in line
             for line in refusals), refusals
  # Nothing trained or evaluated (a step logs its loss, an evaluation its
  # ranks).
  assert not re.search(r"loss = [-\d]", text), text[-3000:]
  assert "Horovod ranks" not in text, text[-3000:]
  _check_hosts(hosts, cap, before)


def test_parameter_servers_on_hosts_capped_below_the_table(cluster, scratch):
  hosts = cluster(5).hosts
  cap = 1400 * MiB
  rows, dim = 1 << 23, 32
  assert rows * dim * 4 * 2 >= 1.45 * cap
  for host in hosts:
    host.limit_memory(cap)
  before = {host.name: host.memory_use() for host in hosts}
  model_dir, export = scratch / "model", scratch / "export"
  log = _run(hosts[0], [
      PYTHON, "-m", "estimator_scale.launcher", "--hosts",
      "host1,host2,host3:0,host4:0,host5:0", "--ps", "3", "--", PYTHON,
      "-m", "estimator_scale.cli", "train",
      "--model_module=tools.bench.ps_memory.model", "--model=one_table",
      "--distribution=parameter_server", "--optimizer=adagrad",
      f"--hparams=rows={rows},dim={dim}", "--global_batch_size=64",
      "--train_steps=4", "--eval_steps=3", f"--model_dir={model_dir}",
      f"--export_dir={export}"], LAUNCH_ENV, scratch / "log", 480)
  assert "Evaluating on the 3 ps tasks" in log, log[-3000:]
  peaks = _check_hosts(hosts, cap, before)
  assert [p for p in export.iterdir() if p.name.isdigit()], log[-3000:]
  print(f"peaks MiB under a {cap // MiB} MiB cap per host: {peaks}")
