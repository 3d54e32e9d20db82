"""TF_CONFIG workers check at start that they share the chief's model_dir.

The tasks here are called in one process with their own TF_CONFIG; two
directories stand for two hosts' own disks. tests/multihost/test_storage.py
runs the same check across hosts.
"""
import json

import pytest

from estimator_scale import environment
from estimator_scale import errors
from estimator_scale.backends import tf_config

CLUSTER = {"worker": ["host1:2222", "host2:2222"]}


def _environ(task_type, index, cluster=None, wait="0.3"):
  return {"TF_CONFIG": json.dumps({"cluster": cluster or CLUSTER,
                                   "task": {"type": task_type,
                                            "index": index}}),
          environment.SHARED_DIR_WAIT: wait}


def _check(model_dir, environ, backend=None):
  tf_config.check_shared_model_dir(
      str(model_dir), backend or tf_config.MultiWorkerMirrored(), environ)


def test_a_worker_that_sees_the_chiefs_token_goes_on(tmp_path):
  _check(tmp_path / "run", _environ("worker", 0))  # the chief, first
  _check(tmp_path / "run", _environ("worker", 1))


def test_a_worker_on_a_directory_of_its_own_fails_in_one_line(tmp_path):
  _check(tmp_path / "host1", _environ("worker", 0))
  with pytest.raises(errors.ConfigError) as raised:
    _check(tmp_path / "host2", _environ("worker", 1))
  message = str(raised.value)
  assert message.startswith(f"model_dir={tmp_path / 'host2'}: worker 1 sees "
                            "no token from this job's chief there after "
                            "0.3 s")
  assert ("multi_worker_mirrored needs one model_dir for all its workers: a "
          "shared file system, or object storage (s3://, gs://)") in message
  assert "\n" not in message


def test_a_token_of_another_cluster_does_not_count(tmp_path):
  _check(tmp_path, _environ("worker", 0,
                            cluster={"worker": ["old1:2222", "old2:2222"]}))
  with pytest.raises(errors.ConfigError, match="sees no token"):
    _check(tmp_path, _environ("worker", 1))


def test_parameter_servers_check_nothing(tmp_path):
  cluster = {"chief": ["host1:2222"], "worker": ["host2:2222"],
             "ps": ["host1:2223"]}
  _check(tmp_path / "elsewhere", _environ("ps", 0, cluster=cluster),
         tf_config.ParameterServer())
  assert not (tmp_path / "elsewhere").exists()
  _check(tmp_path / "run", _environ("chief", 0, cluster=cluster),
         tf_config.ParameterServer())
  _check(tmp_path / "run", _environ("worker", 0, cluster=cluster),
         tf_config.ParameterServer())


@pytest.mark.parametrize("wait", ["0", "-1", "soon"])
def test_the_wait_must_be_seconds(tmp_path, wait):
  with pytest.raises(errors.ConfigError,
                     match=f"{environment.SHARED_DIR_WAIT}='{wait}'"):
    _check(tmp_path, _environ("worker", 1, wait=wait))
