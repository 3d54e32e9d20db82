"""The moments a chaos driver aims faults at: the package calls the
listener ESTIMATOR_SCALE_LISTENER names (estimator_scale.moments); the
driver's (tools/rig/chaos/moments.py) lets the one process that begins an
armed moment first take it and holds it until the driver lets it go; a
training's checkpoint saves reach them."""
import os
import threading
import time
import types

import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import environment
from estimator_scale import errors
from estimator_scale import moments
from estimator_scale.backends import coordinator
from tests.helpers import waiting
from tests.workers.tiny_models import generated_data
from tools.rig.chaos import core
from tools.rig.chaos import moments as chaos_moments


@pytest.fixture(name="armed_dir")
def _armed_dir(tmp_path, monkeypatch):
  for name, value in chaos_moments.environ(str(tmp_path)).items():
    monkeypatch.setenv(name, value)
  return tmp_path


def _arm(directory, moment):
  (directory / f"{moment}.armed").write_text("")


def test_without_the_variable_a_moment_is_nothing(tmp_path, monkeypatch):
  monkeypatch.delenv(environment.LISTENER, raising=False)
  monkeypatch.setenv(chaos_moments.DIRECTORY, str(tmp_path))
  _arm(tmp_path, "save")
  moments.begins("save")
  assert (tmp_path / "save.armed").exists()
  assert moments.save_listeners() == []


def test_a_listener_that_cannot_act_is_named(monkeypatch):
  monkeypatch.setenv(environment.LISTENER, "no_such_module_here")
  with pytest.raises(errors.ConfigError, match=(
      "ESTIMATOR_SCALE_LISTENER='no_such_module_here' cannot be imported")):
    moments.begins("save")
  monkeypatch.setenv(environment.LISTENER, "json")
  with pytest.raises(errors.ConfigError, match="'json' has no begins"):
    moments.save_listeners()


def _saving(steps):
  return types.SimpleNamespace(config=types.SimpleNamespace(
      save_checkpoints_steps=steps, save_checkpoints_secs=None))


def test_a_process_that_saves_no_checkpoint_gets_no_listener(armed_dir):
  # TensorFlow refuses saving listeners without a checkpoint saver (a
  # Horovod rank other than 0): neither the lab's nor the user's go there.
  del armed_dir
  users = tf.estimator.CheckpointSaverListener()
  assert coordinator.saving_listeners(_saving(None), [users]) == []
  given = coordinator.saving_listeners(_saving(10), [users])
  assert len(given) == 2 and given[-1] is users


def test_one_process_takes_an_armed_moment_and_waits_to_be_let_go(armed_dir):
  moments.begins("merge")  # nothing armed: returns at once
  _arm(armed_dir, "merge")
  done = []
  takers = [threading.Thread(target=lambda: done.append(
      moments.begins("merge"))) for _ in range(2)]
  for t in takers:
    t.start()
  deadline = time.monotonic() + 5
  taken = waiting.wait_for(lambda: list(armed_dir.glob("merge.*.*")),
                           "merge taken", deadline, poll=0.01)
  assert len(taken) == 1, taken
  assert taken[0].name == f"merge.{chaos_moments.host()}.{os.getpid()}"
  # The other found nothing armed and returns; the taker still waits after
  # it has (a slow machine can only delay the first, never free the second).
  waiting.wait_for(lambda: done, "the other's return", deadline, poll=0.01)
  time.sleep(0.3)
  assert len(done) == 1
  taken[0].unlink()
  for t in takers:
    t.join(timeout=5)
  assert len(done) == 2 and not list(armed_dir.iterdir())


def test_the_driver_finds_the_host_and_releases_it(armed_dir):
  driver = types.SimpleNamespace(
      moments_dir=str(armed_dir), log=lambda line: None, now=lambda: 0.0,
      _lead_in=lambda moment, kind: True)
  held = []

  def save_later():
    time.sleep(0.2)
    start = time.monotonic()
    moments.begins("save")
    held.append(time.monotonic() - start)
  worker = threading.Thread(target=save_later)
  worker.start()
  host = core.Driver._at_moment(driver, "save", "kill_rank")  # pylint: disable=protected-access
  worker.join(timeout=10)
  assert host == chaos_moments.host()
  assert core.RELEASE_SECONDS * 0.8 <= held[0] < core.RELEASE_SECONDS + 2


def test_a_training_marks_its_checkpoint_saves(armed_dir, tmp_path):
  model, features, labels = generated_data("mlp", 32)
  estimator = es.make_estimator(model, model_dir=str(tmp_path / "model"),
                                save_checkpoints_steps=2)
  input_fn = es.inputs.from_arrays(features, labels, 8,
                                   topology=estimator.topology)
  _arm(armed_dir, "save")
  taker = threading.Thread(target=estimator.train, args=(input_fn,),
                           kwargs={"max_steps": 4})
  taker.start()
  waiting.wait_for(lambda: list(armed_dir.glob("save.*.*")), "save marked",
                   time.monotonic() + 60, poll=0.01)
  for path in armed_dir.glob("save.*.*"):
    path.unlink()
  taker.join(timeout=60)
  assert estimator.latest_checkpoint().endswith("-4")
