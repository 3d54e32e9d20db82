"""A Slurm step's variables as a cluster: hostlists, layouts, TF_CONFIG, ranks."""
import json
import socket

import pytest

from estimator_scale import backends
from estimator_scale import errors
from estimator_scale.backends import slurm
from estimator_scale.backends import tf_config
from estimator_scale.backends.horovod import srun


def _step(procid, nodelist="n[1-2]", tasks_per_node="1(x2)", **more):
  """What srun gives task `procid` (SLURMD_NODENAME etc. only when asked)."""
  tasks = sum(slurm.expand_tasks_per_node(tasks_per_node))
  return dict({"SLURM_PROCID": str(procid),
               "SLURM_STEP_NUM_TASKS": str(tasks),
               "SLURM_STEP_NODELIST": nodelist,
               "SLURM_STEP_TASKS_PER_NODE": tasks_per_node}, **more)


@pytest.mark.parametrize("spec,names", [
    ("n1", ["n1"]),
    ("n1,n2", ["n1", "n2"]),
    ("n[1-2,5]", ["n1", "n2", "n5"]),
    ("gpu[08-10],login1", ["gpu08", "gpu09", "gpu10", "login1"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a[3],b[1-2]", ["a3", "b1", "b2"]),
])
def test_hostlists_expand_as_scontrol_show_hostnames(spec, names):
  assert slurm.expand_hostlist(spec) == names


@pytest.mark.parametrize("spec,message", [
    ("n[1-2", "never closed"),
    ("n1],n2", r"without '\["),
    ("n[2-1]", "runs backwards"),
    ("n[a-b]", "not a number"),
    ("n1,,n2", "empty entry"),
])
def test_bad_hostlists_name_the_variable(spec, message):
  with pytest.raises(errors.TopologyError, match=message) as error:
    slurm.expand_hostlist(spec)
  assert "SLURM_STEP_NODELIST" in str(error.value)


@pytest.mark.parametrize("spec,counts", [
    ("1(x2)", [1, 1]), ("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,3", [1, 3]),
])
def test_tasks_per_node_expand(spec, counts):
  assert slurm.expand_tasks_per_node(spec) == counts


@pytest.mark.parametrize("spec", ["0", "2(x0)", "2x3", "", "1(x2"])
def test_bad_tasks_per_node_name_the_variable(spec):
  with pytest.raises(errors.TopologyError, match="SLURM_STEP_TASKS_PER_NODE"):
    slurm.expand_tasks_per_node(spec)


def test_block_and_cyclic_layouts_place_tasks_as_slurm_does():
  block = slurm.read_step(_step(2, "n[1-2]", "2,1"))
  assert block.nodes == ("n1", "n1", "n2")
  cyclic = slurm.read_step(_step(2, "n[1-2]", "2,1",
                                 SLURM_DISTRIBUTION="cyclic"))
  assert cyclic.nodes == ("n1", "n2", "n1")
  assert (cyclic.node, cyclic.local_index(2)) == ("n1", 1)


def test_two_nodes_one_task_each_make_two_workers():
  configs = [slurm.tf_config(_step(i)) for i in range(2)]
  cluster = {"worker": ["n1:2222", "n2:2222"]}
  assert configs == [{"cluster": cluster, "task": {"type": "worker",
                                                   "index": i}}
                     for i in range(2)]


def test_tasks_on_one_node_take_ports_in_order_and_ps_come_first():
  environ = _step(3, "n[1-2]", "2(x2)", ESTIMATOR_SCALE_PS_TASKS="1",
                  ESTIMATOR_SCALE_PORT="3000")
  assert slurm.tf_config(environ) == {
      "cluster": {"ps": ["n1:3000"], "chief": ["n1:3001"],
                  "worker": ["n2:3000", "n2:3001"]},
      "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("change,message", [
    ({"SLURM_PROCID": "2"}, "SLURM_PROCID=2 is outside"),
    ({"SLURM_STEP_NUM_TASKS": "3"}, "places 2 task.* SLURM_STEP_NUM_TASKS=3"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2"}, "gives 1 node.* names 2"),
    ({"SLURM_STEP_NUM_NODES": "3"}, "SLURM_STEP_NUM_NODES=3"),
    ({"SLURM_STEP_NODELIST": ""}, "SLURM_STEP_NODELIST is not set"),
    ({"SLURM_STEP_NUM_TASKS": "two"}, "SLURM_STEP_NUM_TASKS='two'"),
    ({"SLURMD_NODENAME": "n2"}, "SLURMD_NODENAME='n2'.* belongs on 'n1'"),
    ({"SLURM_LOCALID": "1"}, "SLURM_LOCALID='1'"),
    ({"SLURM_DISTRIBUTION": "plane=2"}, "SLURM_DISTRIBUTION='plane=2'"),
    ({"ESTIMATOR_SCALE_PS_TASKS": "2"}, "ESTIMATOR_SCALE_PS_TASKS='2'.* 0 to 1"),
    ({"ESTIMATOR_SCALE_PORT": "80"}, "ESTIMATOR_SCALE_PORT='80'"),
])
def test_an_inconsistent_step_is_refused_naming_the_variable(change, message):
  with pytest.raises(errors.Error, match=message):
    slurm.tf_config(dict(_step(0), **change))


def test_a_batch_script_without_srun_is_told_to_use_it():
  environ = {"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
  with pytest.raises(errors.TopologyError, match="SLURM_STEP_NUM_TASKS is "
                     "not set.* srun"):
    slurm.read_step(environ)


def test_the_backend_reads_the_step_as_a_tf_config_cluster():
  environ = _step(1, "n[1-3]", "1(x3)", ESTIMATOR_SCALE_PS_TASKS="1")
  tf_config.adopt_slurm_step(environ)
  assert json.loads(environ["TF_CONFIG"])["task"] == {"type": "chief",
                                                      "index": 0}
  topology = tf_config.read_topology(backends.get("parameter_server"),
                                     environ)
  assert (topology.num_workers, topology.worker_index,
          topology.is_chief) == (2, 0, True)


def test_a_tf_config_already_set_wins_over_the_step():
  environ = dict(_step(1), TF_CONFIG="given")
  tf_config.adopt_slurm_step(environ)
  assert environ["TF_CONFIG"] == "given"


def test_horovod_ranks_follow_horovodrun_local_and_cross_ranks():
  # n1 runs tasks 0, 1; n2 runs task 2: local rank 1 exists on n1 only.
  ranks = slurm.horovod_ranks(slurm.read_step(_step(0, "n[1-2]", "2,1")))
  assert [(r.hostname, r.rank, r.local_rank, r.local_size, r.cross_rank,
           r.cross_size) for r in ranks] == [
               ("n1", 0, 0, 2, 0, 2), ("n1", 1, 1, 2, 0, 1),
               ("n2", 2, 0, 1, 1, 2)]


def test_task_0_serves_the_rendezvous_and_every_task_gets_its_variables():
  served, waited = [], []
  environ = _step(0, "localhost", "2")
  server = srun.start_rank(environ, serve=lambda r, p: served.append(p) or p,
                           wait=lambda *a: waited.append(a))
  assert (server, served, waited) == (2222, [2222], [])
  assert {k: environ[k] for k in ("HOROVOD_RANK", "HOROVOD_SIZE",
                                  "HOROVOD_LOCAL_SIZE",
                                  "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                  "HOROVOD_CONTROLLER")} == {
      "HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_SIZE": "2",
      "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
      "HOROVOD_CONTROLLER": "gloo"}
  other = _step(1, "localhost", "2")
  assert srun.start_rank(other, serve=served.append,
                         wait=lambda *a: waited.append(a)) is None
  assert (other["HOROVOD_LOCAL_RANK"], waited) == (
      "1", [("127.0.0.1", 2222, "localhost")])


def test_a_rank_uses_the_interface_of_its_nodes_address():
  psutil = pytest.importorskip("psutil")
  for name, addresses in psutil.net_if_addrs().items():
    for address in addresses:
      if (address.family == socket.AF_INET and
          not address.address.startswith("127.")):
        assert srun._interface(address.address) == name
  # A node name that resolves to loopback tells no interface.
  assert srun._interface("127.0.0.1") is None
  environ = _step(0, "localhost", "1")
  srun.start_rank(environ, serve=lambda r, p: None, wait=None)
  assert "HOROVOD_GLOO_IFACE" not in environ


def test_a_rank_waits_for_the_rendezvous_then_names_its_node():
  with pytest.raises(errors.TopologyError, match="n1 .*did not answer"):
    srun._wait_for_rendezvous("127.0.0.1", 1, "n1", timeout=0.3)


def test_a_parameter_server_waits_until_every_trainer_came_and_went():
  tasks = [("chief 0", "n1:2223"), ("worker 0", "n2:2222")]
  # What the probes see, poll after poll: the worker starts late, the
  # chief ends first; only the last poll sees neither.
  polls = iter([set(), {"n1:2223"}, {"n2:2222"}, set()])
  up = set()
  sleeps = []

  def sleep(_):
    sleeps.append(1)
    up.clear()
    up.update(next(polls))

  slurm.wait_for_trainers_to_end(tasks, probe=lambda a: a in up, sleep=sleep)
  # The first, empty poll (nobody started yet) did not end it.
  assert len(sleeps) == 4


def test_a_steps_trainers_are_its_chief_and_workers():
  config = slurm.tf_config(_step(0, tasks_per_node="2,1",
                                 ESTIMATOR_SCALE_PS_TASKS="1"))
  assert config["task"] == {"type": "ps", "index": 0}
  assert slurm.trainers(config) == [("chief 0", "n1:2223"),
                                    ("worker 0", "n2:2222")]
