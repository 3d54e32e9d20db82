"""Horovod across two hosts of the rig, whose names resolve to loopback.

On such hosts (stock Debian's 127.0.1.1 line) an unpatched Horovod 0.28.1
aborts in hvd.init() with "gloo::IoException ... connect [127.0.1.1]:N:
Connection refused": the global process set's Gloo context ignores the
interface horovodrun found. tools/setup_env.sh builds Horovod with
third_party/horovod/process_set_iface.patch, which the rig tests depend on;
where the patch is missing, the Horovod backend refuses such a job in one
line instead (the unit tests at the end fake that environment).

Every job is started from host1 as a user would, with a minimal environment,
and horovodrun finds the network interface itself (no --network-interface).
"""
import json
import os
import re
import textwrap

import numpy as np
import pytest

from estimator_scale import errors
from estimator_scale.backends.horovod import backend
from tests.multihost.conftest import HOROVODRUN, PYTHON, ROOT

multihost = pytest.mark.multihost

ENV = {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"}
"""What a job starts with: horovodrun forwards its environment to every rank,
so this is all a rank gets besides Horovod's own variables."""

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


def train_argv(model_dir, *flags):
  """The CLI's training command for digits_cnn on Horovod, as ranks run it."""
  return [PYTHON, "-m", "estimator_scale.train", "--distribution=horovod",
          "--model=digits_cnn", f"--model_dir={model_dir}", *flags]


def horovodrun_argv(hosts, *command, hostfile=None, options=()):
  """horovodrun with Gloo, one rank per host: `-H` or, given, `--hostfile`."""
  placement = (["--hostfile", str(hostfile)] if hostfile else
               ["-H", ",".join(f"{h}:1" for h in hosts)])
  return [HOROVODRUN, "--gloo", *options, "-np", str(len(hosts)), *placement,
          *command]


@multihost
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


@multihost
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


@multihost
def test_an_unpatched_horovod_on_loopback_hosts_fails_in_one_line(
    cluster, tmp_path):
  host1, host2 = cluster(2, loopback_hostname=True).hosts
  # Each host sees an empty marker, as an environment whose Horovod was not
  # built by tools/setup_env.sh would; the build itself stays patched.
  empty = tmp_path / "no-patch"
  empty.write_text("")
  for host in (host1, host2):
    hidden = host.run(["mount", "--bind", str(empty), backend.PATCH_MARKER])
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


# The check itself, on a faked environment: no rig, no horovodrun.

GLOO_RANK = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_RANK": "1",
             "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_SIZE": "1",
             "HOROVOD_HOSTNAME": "host2"}


def _check(environ, address, marker):
  backend.check_process_set_interface(
      environ, resolve=lambda: ("host2", address), marker=str(marker))


def test_unpatched_horovod_on_a_loopback_name_is_refused_before_init(
    tmp_path):
  with pytest.raises(errors.TopologyError) as raised:
    _check(GLOO_RANK, "127.0.1.1", tmp_path / "absent")
  message = str(raised.value)
  assert "\n" not in message
  assert message.startswith("Horovod rank 1 on host2: the host name host2 "
                            "resolves to 127.0.1.1 (loopback)")
  assert "process_set_iface.patch" in message and "`make setup`" in message
  empty = tmp_path / "empty"
  empty.write_text("")
  with pytest.raises(errors.TopologyError):
    _check(GLOO_RANK, "127.0.0.1", empty)
  with pytest.raises(errors.TopologyError):
    _check(GLOO_RANK, "::1", tmp_path / "absent")


@pytest.mark.parametrize("case", [
    "patched", "own_address", "one_host", "not_gloo", "unresolved"])
def test_the_process_set_check_lets_every_other_job_through(tmp_path, case):
  marker = tmp_path / "absent"
  environ, address = dict(GLOO_RANK), "127.0.1.1"
  if case == "patched":
    marker = tmp_path / ".horovod-patch"
    marker.write_text("3231eb60c6a06bc8d7990bfee1f315ec273f68e6")
  elif case == "own_address":
    address = "10.77.0.2"
  elif case == "one_host":
    environ["HOROVOD_LOCAL_SIZE"] = "2"
  elif case == "not_gloo":  # mpirun sets no Gloo rendezvous
    del environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
  else:
    address = None
  _check(environ, address, marker)


def test_the_setups_horovod_is_known_as_patched():
  # tools/setup_env.sh writes the patch's sum to $VENV/.horovod-patch after a
  # patched build; the backend reads it where this Python's prefix is.
  assert backend.PATCH_MARKER == os.path.join(ROOT, ".venv", ".horovod-patch")
  with open(backend.PATCH_MARKER, encoding="utf-8") as f:
    assert f.read().strip()
