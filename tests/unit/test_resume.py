"""Resuming a checkpoint with another recipe (estimator_scale/resume.py).

Each test trains a few updates with one recipe, resumes in the same
model_dir with another, and checks what the first session of the resumed
run holds: the network and global_step as the checkpoint has them, the
state the new recipe adds at its initial value, and one log line naming
that state. A network that changed must stop the run in one line instead.
The same from the command line is tests/integration/test_resume_cli.py.
"""
import logging

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from tests.helpers import trainer
from tests.helpers.checkpoints import FRESH_LINE, checkpoint_values
from tests.workers.tiny_models import generated_data


class Layers(es.ClassifierModel):
  """Dense layers of the given widths on 5 features, 3 classes; optionally
  a batch norm, whose moving statistics are network state a Saver writes
  but no optimizer trains."""

  def __init__(self, widths=(16,), batch_norm=False):
    self.widths, self.batch_norm = widths, batch_norm

  def logits(self, features, training, params):
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    net = features["x"]
    for i, width in enumerate(self.widths):
      net = tf.compat.v1.layers.dense(net, width, tf.nn.tanh, name=f"hidden{i}",
                                      kernel_initializer=init)
    if self.batch_norm:
      net = tf.keras.layers.BatchNormalization(name="norm")(net,
                                                            training=training)
    return tf.compat.v1.layers.dense(net, 3, kernel_initializer=init,
                                     name="out")

  def serving_features(self):
    return {"x": tf.TensorSpec([5], tf.float32)}


class ValuesAtStart(tf.compat.v1.train.SessionRunHook):
  """The values of all global variables once the session is made (restored)."""

  def begin(self):
    self._variables = {v.op.name: v for v in tf.compat.v1.global_variables()}

  def after_create_session(self, session, coord):
    self.values = session.run(self._variables)


def _train(model_dir, steps, model=None, **config):
  _, features, labels = generated_data("mlp", 64)
  start = ValuesAtStart()
  trainer.train(model or Layers(), features, labels, model_dir, 8, steps,
                hooks=[start], **config)
  return start.values


def _fresh_lines(caplog):
  return [r.getMessage() for r in caplog.records
          if FRESH_LINE in r.getMessage()]


def _drop_from_checkpoint(model_dir, names):
  """Rewrites the latest checkpoint without `names`, as one written by a
  version of the recipe that did not have them would be."""
  path = tf.train.latest_checkpoint(str(model_dir))
  values = checkpoint_values(model_dir)
  with tf.Graph().as_default():
    kept = [tf.compat.v1.Variable(value, name=name)
            for name, value in values.items() if name not in names]
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(kept).save(session, path,
                                          write_meta_graph=False)
  assert not set(names) & set(checkpoint_values(model_dir))


def _assert_network_restored(start, saved):
  network = [name for name in saved if name.startswith("model/") and
             not name.endswith(("/Momentum", "/Adam", "/Adam_1"))]
  assert network
  for name in network:
    np.testing.assert_array_equal(start[name], saved[name], err_msg=name)


def test_adascale_state_starts_fresh_on_a_plain_momentum_checkpoint(
    tmp_path, caplog):
  caplog.set_level(logging.INFO)
  _train(tmp_path, 4)
  saved = checkpoint_values(tmp_path)
  assert not any(name.startswith("adascale/") for name in saved)
  start = _train(tmp_path, 8, lr_scaling="adascale", accumulation_steps=2)
  assert start["global_step"] == 4
  _assert_network_restored(start, saved)
  np.testing.assert_array_equal(start["model/out/kernel/Momentum"],
                                saved["model/out/kernel/Momentum"])
  assert start["adascale/progress"] == 0 and start["adascale/ema_weight"] == 0
  assert start["adascale/gain"] == 1 and start["adascale/scale"] == 2
  (line,) = _fresh_lines(caplog)
  path = tf.train.latest_checkpoint(str(tmp_path))
  assert str(tmp_path / "model.ckpt-4") in line, line
  for name in ("adascale/ema_weight", "adascale/gain", "adascale/progress",
               "adascale/scale", "adascale/grad_var_avg"):
    assert name in line
  assert "\n" not in line and "model/" not in line
  after = checkpoint_values(tmp_path)
  assert path.endswith("model.ckpt-8")
  assert after["global_step"] == 8
  # Four updates, each advancing tau by its gain, which is at least 1.
  assert after["adascale/progress"] >= 4


def test_a_complete_checkpoint_restores_without_a_line(tmp_path, caplog):
  caplog.set_level(logging.INFO)
  _train(tmp_path, 4, lr_scaling="adascale", accumulation_steps=2)
  saved = checkpoint_values(tmp_path)
  start = _train(tmp_path, 6, lr_scaling="adascale", accumulation_steps=2)
  assert not _fresh_lines(caplog)
  for name in ("adascale/progress", "adascale/grad_var_avg", "global_step",
               "accumulation/micro_batches"):
    assert start[name] == saved[name], name


def test_the_loss_scale_starts_fresh_under_mixed_float16(tmp_path, caplog):
  caplog.set_level(logging.INFO)
  _train(tmp_path, 4)
  saved = checkpoint_values(tmp_path)
  start = _train(tmp_path, 6, precision="mixed_float16")
  _assert_network_restored(start, saved)
  assert start["loss_scale/scale"] == 2.0 ** 15
  assert start["loss_scale/good_updates"] == 0
  (line,) = _fresh_lines(caplog)
  assert "loss_scale/scale" in line and "loss_scale/good_updates" in line


def test_a_new_optimizers_slots_start_fresh(tmp_path, caplog):
  caplog.set_level(logging.INFO)
  _train(tmp_path, 4)
  saved = checkpoint_values(tmp_path)
  start = _train(tmp_path, 6, optimizer="adam", learning_rate=0.01)
  _assert_network_restored(start, saved)
  for name in ("model/hidden0/kernel", "model/out/bias"):
    assert not np.any(start[name + "/Adam"])
    assert not np.any(start[name + "/Adam_1"])
  (line,) = _fresh_lines(caplog)
  # Four variables, so four slots of each kind: counted, not listed.
  assert "optimizer slot 'Adam' of 4 variable(s)" in line, line
  assert "optimizer slot 'Adam_1' of 4 variable(s)" in line, line
  assert "model/hidden0/kernel/Adam" not in line


def test_the_micro_batch_counter_starts_fresh(tmp_path, caplog):
  caplog.set_level(logging.INFO)
  _train(tmp_path, 4)
  _drop_from_checkpoint(tmp_path, ["accumulation/micro_batches"])
  start = _train(tmp_path, 6, accumulation_steps=2)
  assert start["accumulation/micro_batches"] == 0
  assert start["global_step"] == 4
  (line,) = _fresh_lines(caplog)
  assert line.endswith("starting it fresh: accumulation/micro_batches"), line
  # Two updates of two micro-batches since it started.
  assert checkpoint_values(tmp_path)["accumulation/micro_batches"] == 4


def _single_line_error(tmp_path, model, **config):
  with pytest.raises(es.errors.ConfigError) as raised:
    _train(tmp_path, 6, model=model, **config)
  message = str(raised.value)
  assert "\n" not in message
  assert str(tmp_path / "model.ckpt-4") in message
  return message


def test_a_network_variable_whose_shape_changed_fails_in_one_line(tmp_path):
  _train(tmp_path, 4)
  message = _single_line_error(tmp_path, Layers(widths=(8,)))
  assert message.startswith("cannot resume: variable model/hidden0/bias has "
                            "shape [16] in checkpoint "), message
  assert "but [8] in this model" in message
  # The layer's kernel, the next layer's kernel and their three slots.
  assert "(5 more variable(s) differ too)" in message


def test_a_network_variable_missing_from_the_checkpoint_fails(tmp_path):
  _train(tmp_path, 4)
  message = _single_line_error(tmp_path, Layers(widths=(16, 16)))
  assert message.startswith("cannot resume: network variable "
                            "model/hidden1/bias (shape [16] in this model) "
                            "is not in checkpoint "), message


def test_network_state_no_optimizer_trains_is_not_recipe_state(tmp_path):
  # Batch norm's moving statistics are not trainable, yet starting them
  # fresh would lose what training computed.
  _train(tmp_path, 4, model=Layers(batch_norm=True))
  _drop_from_checkpoint(tmp_path, ["model/norm/moving_mean"])
  message = _single_line_error(tmp_path, Layers(batch_norm=True))
  assert "model/norm/moving_mean (shape [16] in this model)" in message


def test_a_resumed_session_leaves_the_checkpoint_it_restored_as_it_was(
    tmp_path):
  # Other processes may be restoring the same files when a session starts
  # (Horovod ranks after an elastic change): they must not be rewritten.
  _, features, labels = generated_data("mlp", 64)

  def train(steps):
    estimator = es.make_estimator(Layers(), model_dir=str(tmp_path),
                                  random_seed=0, save_checkpoints_steps=5,
                                  keep_checkpoint_max=2)
    estimator.train(trainer.array_input(features, labels, 8),
                    max_steps=steps)

  def files(step):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in tmp_path.glob(f"model.ckpt-{step}.*")}
  train(10)
  restored = files(10)
  assert len(restored) == 3, restored  # index, data, meta graph
  train(12)
  assert files(10) == restored
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-12")
  # Counted for keep_checkpoint_max all the same: gone two saves later.
  train(15)
  assert not files(10) and files(12) and files(15)
