"""Horovod across two hosts of the rig, whose names resolve to loopback.

On such hosts (stock Debian's 127.0.1.1 line) an unpatched Horovod 0.28.1
aborts in hvd.init() with "gloo::IoException ... connect [127.0.1.1]:N:
Connection refused": the global process set's Gloo context ignores the
interface horovodrun found. tools/rig/setup_env.sh builds Horovod with
third_party/horovod/process_set_iface.patch, which the rig tests depend on;
where the patch is missing, the Horovod backend refuses such a job in one
line instead (tests/unit/test_horovod_process_set.py fakes that
environment).

Every job is started from host1 as a user would, with a minimal environment,
and horovodrun finds the network interface itself (no --network-interface).
"""
import json
import re
import textwrap

import numpy as np
import pytest

from estimator_scale.backends.horovod import ranks as ranks_lib
from tests.helpers.processes import ROOT
from tests.helpers.rig import ENV, PYTHON, horovodrun_argv, train_argv

ALLREDUCE = textwrap.dedent("""
    import socket
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    total = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum)
    print(f"rank {hvd.rank()} of {hvd.size()} on {socket.gethostname()}: "
          f"sum {float(total.numpy()[0])}", flush=True)
""")

RANK_VARIABLES = textwrap.dedent('''
    """A --model_module for the tests: every rank of digits_cnn saves the
    variables of its own session when training ends, so the tests compare
    what each host really holds rather than rank 0's checkpoint."""
    import os
    import socket

    import numpy as np
    import tensorflow as tf

    from model_zoo import digits


    class SaveVariablesHook(tf.compat.v1.train.SessionRunHook):

      def end(self, session):
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        path = os.path.join(os.environ["RANK_VARIABLES_DIR"],
                            f"rank{os.environ['HOROVOD_RANK']}.npz")
        np.savez(path, __host__=np.array(socket.gethostname()),
                 **session.run(variables))


    _training_hooks = digits.DigitsCNN.training_hooks
    digits.DigitsCNN.training_hooks = lambda self, features, labels: (
        list(_training_hooks(self, features, labels)) + [SaveVariablesHook()])
''')


def test_allreduce_across_two_hosts_named_on_loopback_without_network_interface(
    cluster, tmp_path):
  script = tmp_path / "allreduce.py"
  script.write_text(ALLREDUCE)
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  # horovodrun picks the NIC itself (no --network-interface) and starts both
  # ranks over ssh, as on real hosts.
  proc = host1.run(horovodrun_argv([host1.name, host2.name], PYTHON,
                                   str(script)),
                   env=ENV, timeout=180)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  ranks = sorted(re.findall(r"rank (\d) of 2 on (\S+): sum (\S+)", log))
  assert ranks == [("0", "host1", "3.0"), ("1", "host2", "3.0")], log[-4000:]


@pytest.mark.parametrize("placement", ["hosts", "hostfile"])
def test_digits_cnn_trains_across_two_hosts_with_the_same_variables_on_each(
    cluster, tmp_path, placement):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  (tmp_path / "rank_variables.py").write_text(RANK_VARIABLES)
  variables = tmp_path / "variables"
  variables.mkdir()
  hostfile = None
  if placement == "hostfile":  # horovodrun's format: one "NAME slots=N" a line
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("host1 slots=1\nhost2 slots=1\n")
  summary = tmp_path / "summary.json"
  proc = host1.run(
      horovodrun_argv(
          [host1.name, host2.name],
          *train_argv(tmp_path / "model", "--train_steps=300",
                      f"--summary_json={summary}",
                      "--model_module=rank_variables"),
          hostfile=hostfile),
      cwd=ROOT, env={**ENV, "PYTHONPATH": str(tmp_path),
                     "RANK_VARIABLES_DIR": str(variables)},
      timeout=400)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  result = json.loads(summary.read_text())
  assert result["workers"] == 2 and result["global_step"] == 300, result
  assert result["eval"]["accuracy"] >= 0.95, result
  ranks = [dict(np.load(variables / f"rank{r}.npz")) for r in (0, 1)]
  assert [str(r.pop("__host__")) for r in ranks] == ["host1", "host2"]
  assert sorted(ranks[0]) == sorted(ranks[1])
  assert {"global_step", "model/conv1/kernel", "model/logits/bias",
          "model/logits/bias/Momentum"} <= set(ranks[0]), sorted(ranks[0])
  assert ranks[0]["global_step"] == 300
  for name, value in ranks[0].items():  # bit for bit: one allreduced update
    assert np.array_equal(value, ranks[1][name]), name


def test_an_unpatched_horovod_on_loopback_hosts_fails_in_one_line(
    cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  # Each host sees an empty marker, as an environment whose Horovod was not
  # built by tools/rig/setup_env.sh would; the build itself stays patched.
  empty = tmp_path / "no-patch"
  empty.write_text("")
  for host in (host1, host2):
    hidden = host.run(["mount", "--bind", str(empty), ranks_lib.PATCH_MARKER])
    assert hidden.returncode == 0, hidden.stderr
  proc = host1.run(horovodrun_argv([host1.name, host2.name],
                                   *train_argv(tmp_path / "model")),
                   cwd=ROOT, env=ENV, timeout=180)
  log = proc.stdout + proc.stderr
  assert proc.returncode != 0, log[-4000:]
  assert "terminate called" not in log, log[-4000:]
  lines = [l for l in log.splitlines() if "estimator-scale: error:" in l]
  assert lines, log[-4000:]
  for line in lines:
    assert re.search(r"host name host[12] resolves to 127\.0\.1\.1 "
                     r"\(loopback\) and the installed Horovod lacks "
                     r"third_party/horovod/process_set_iface\.patch", line)
    assert "`make setup`" in line and "/etc/hosts" in line
