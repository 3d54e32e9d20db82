"""Saves that write the rows changed since the save before: a restore of a
full checkpoint and its deltas equals the full save of the same step bit
for bit (rows admitted, looked up, evicted and expired in between, Adagrad's
slot, a sketch); a torn delta is never applied; deltas go with their full
checkpoint; the setting is refused where it does not apply."""
import os

import numpy as np
import pytest
import tensorflow as tf

import estimator_scale as es
from estimator_scale import errors

CAPACITY = 64


class _Clicks(es.BinaryClassifierModel):
  """One dynamic table, too small for the ids that stream through it, so
  rows are evicted and expire between saves."""

  name = None

  def logits(self, features, training, params):
    vectors = es.dynamic_embedding(
        features["id"], 4, capacity=CAPACITY, name="ids", min_count=2,
        steps_to_live=4)
    return tf.keras.layers.Dense(1, name="logit")(vectors)

  def serving_features(self):
    return {"id": tf.TensorSpec([], tf.int64)}


class _Hashed(es.BinaryClassifierModel):
  """A static table beside the dynamic one: Keras' Embedding of hashed ids."""

  name = None

  def logits(self, features, training, params):
    hashed = tf.keras.layers.Embedding(HASHED, 4, name="hashed")(
        features["id"] % HASHED)
    return tf.keras.layers.Dense(1, name="logit")(tf.concat(
        [hashed, _Clicks().logits(features, training, params)], 1))

  serving_features = _Clicks.serving_features


HASHED = 500
POSITIONS = "/_delta_positions"


def _data(steps, batch=16, seed=0):
  """Ids drawn from 160, skewed, so some repeat (admitted at the second
  sighting) and some are seen once."""
  rng = np.random.RandomState(seed)
  ids = (rng.zipf(1.3, size=steps * batch) % 160).astype(np.int64)
  return {"id": ids}, (ids % 3 == 0).astype(np.int64)


def _estimator(model_dir, full_every, keep=5, optimizer="adagrad",
               model=_Clicks):
  return es.make_estimator(
      model(), model_dir=str(model_dir), random_seed=0,
      save_checkpoints_steps=2, keep_checkpoint_max=keep,
      full_checkpoint_every=full_every,
      training_config=es.TrainingConfig(
          optimizer=optimizer, learning_rate=0.1))


def _train(estimator, steps):
  features, labels = _data(steps)
  estimator.train(es.inputs.from_arrays(features, labels, 16),
                  max_steps=steps)


def _checkpoint(model_dir, step):
  return os.path.join(model_dir, f"model.ckpt-{step}")


def _tensors(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def _deltas(model_dir, base):
  directory = os.path.join(model_dir, "deltas", str(base))
  return sorted(int(name[len("delta-"):-len(".index")])
                for name in os.listdir(directory)
                if name.startswith("delta-") and name.endswith(".index"))


class _Restored(tf.compat.v1.train.SessionRunHook):
  """The global variables' values as the session restored them."""

  def __init__(self):
    self.values = None

  def after_create_session(self, session, coord):
    variables = tf.compat.v1.global_variables()
    self.values = dict(zip([v.op.name for v in variables],
                           session.run(variables)))


def _resume_from(model_dir, base, steps, full_every=4, **kwargs):
  """Restores the full checkpoint of `base` and the deltas after it in a
  job that trains on to `steps`; returns the restored values."""
  tf.compat.v1.train.update_checkpoint_state(
      str(model_dir), _checkpoint(model_dir, base))
  restored = _Restored()
  features, labels = _data(steps)
  _estimator(model_dir, full_every, **kwargs).train(
      es.inputs.from_arrays(features, labels, 16), hooks=[restored],
      max_steps=steps)
  return restored.values


@pytest.mark.parametrize("optimizer", ["adagrad", "lazy_adam"])
def test_full_and_deltas_restore_as_the_full_save_bit_for_bit(tmp_path,
                                                              optimizer):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4, optimizer=optimizer), 14)
  # Saves at 0 (full), 2, 4, 6 (deltas), 8 (full), 10, 12, 14 (deltas),
  # then 14 again as the session ends, full.
  assert _deltas(model_dir, 8) == [10, 12, 14]
  assert _deltas(model_dir, 0) == [2, 4, 6]
  full = _tensors(_checkpoint(model_dir, 14))
  assert (full["model/ids/ids"] >= 0).sum() > 8
  # Some rows were freed (evicted or expired) between two saves.
  freed = [(_tensors(str(model_dir / "deltas" / "8" / f"delta-{step}"))[
      "model/ids/ids"] < 0).sum() for step in (10, 12, 14)]
  assert sum(freed) > 0, freed
  assert int(full["global_step"]) == 14
  os.remove(_checkpoint(model_dir, 14) + ".index")

  restored = _resume_from(model_dir, 8, 15, optimizer=optimizer)
  assert set(full) <= set(restored)
  for name, value in full.items():
    np.testing.assert_array_equal(restored[name], value, err_msg=name)


def test_a_static_table_saves_its_changed_rows_and_restores_bit_for_bit(
    tmp_path):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4, model=_Hashed), 14)
  delta = _tensors(str(model_dir / "deltas" / "8" / "delta-10"))
  positions = delta["model/hashed/embeddings/_delta_positions"]
  assert 0 < len(positions) < HASHED / 2
  assert delta["model/hashed/embeddings"].shape == (len(positions), 4)
  assert delta["model/hashed/embeddings/Adagrad"].shape == (
      len(positions), 4)
  full = _tensors(_checkpoint(model_dir, 14))
  os.remove(_checkpoint(model_dir, 14) + ".index")
  restored = _resume_from(model_dir, 8, 15, model=_Hashed)
  for name, value in full.items():
    np.testing.assert_array_equal(restored[name], value, err_msg=name)


def _canned(model_dir, full_every=4):
  """Wide & deep over hashed ids: FTRL's linear weights and Adagrad's
  embedding, both updated by sparse gradients (Keras optimizers)."""
  scale_config = es.build_run_config(
      "none", model_dir=str(model_dir), random_seed=0,
      save_checkpoints_steps=2, keep_checkpoint_max=5,
      full_checkpoint_every=full_every)
  ids = tf.feature_column.categorical_column_with_hash_bucket(
      "id", HASHED, dtype=tf.int64)
  return es.make_estimator(tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=[ids],
      linear_optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Ftrl(0.5), scale_config),
      dnn_feature_columns=[tf.feature_column.embedding_column(ids, 4)],
      dnn_optimizer=es.canned_optimizer(
          tf.keras.optimizers.legacy.Adagrad(0.1), scale_config),
      dnn_hidden_units=[4], config=scale_config.run_config),
                           scale_config=scale_config)


def test_a_canned_estimators_tables_save_deltas(tmp_path):
  model_dir = tmp_path / "model"
  features, labels = _data(15)
  _canned(model_dir).train(es.inputs.from_arrays(features, labels, 16),
                           max_steps=14)
  delta = _tensors(str(model_dir / "deltas" / "8" / "delta-10"))
  tables = [name[:-len(POSITIONS)] for name in delta
            if name.endswith(POSITIONS)]
  assert len(tables) == 2, sorted(delta)  # the embedding and the weights
  for table in tables:
    assert 0 < len(delta[table + POSITIONS]) < HASHED / 2, table
  # Keras names the slots under the optimizer: only their changed rows too.
  slots = [name for name in delta if name.startswith("training/") and
           any(table in name for table in tables)]
  assert len(slots) == 3, slots  # Adagrad's accumulator, FTRL's two
  for name in slots:
    assert len(delta[name]) < HASHED / 2, name
  full = _tensors(_checkpoint(model_dir, 14))
  os.remove(_checkpoint(model_dir, 14) + ".index")
  tf.compat.v1.train.update_checkpoint_state(
      str(model_dir), _checkpoint(model_dir, 8))
  restored = _Restored()
  _canned(model_dir).train(es.inputs.from_arrays(features, labels, 16),
                           hooks=[restored], max_steps=15)
  for name, value in full.items():
    np.testing.assert_array_equal(restored.values[name], value,
                                  err_msg=name)


def test_a_run_without_deltas_still_applies_an_earlier_runs(tmp_path):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4), 14)
  os.remove(_checkpoint(model_dir, 14) + ".index")  # a crash before it
  restored = _resume_from(model_dir, 8, 16, full_every=1)
  assert int(restored["global_step"]) == 14
  assert int(tf.train.load_variable(str(model_dir), "global_step")) == 16


def test_a_delta_is_a_small_part_of_a_full_save(tmp_path):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4), 14)
  directory = model_dir / "deltas" / "8"
  delta = sum(p.stat().st_size for p in directory.glob("delta-10.*"))
  rows = _tensors(str(directory / "delta-10"))
  changed = rows["model/ids/_delta_positions"]
  assert 0 < len(changed) < CAPACITY
  assert rows["model/ids"].shape == (len(changed), 4)
  assert rows["model/ids/ids"].shape == (len(changed),)
  assert int(rows["_delta_after"]) == 8 and int(rows["global_step"]) == 10
  assert delta > 0


def test_a_torn_delta_is_never_applied_nor_what_follows_it(tmp_path):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4), 14)
  reference = _tensors(str(model_dir / "deltas" / "8" / "delta-10"))
  # A crash while delta 12 was renamed into place: its data, no index.
  os.remove(model_dir / "deltas" / "8" / "delta-12.index")
  os.remove(_checkpoint(model_dir, 14) + ".index")
  # Resumes at 10, the last delta that follows.
  restored = _resume_from(model_dir, 8, 11)
  assert int(restored["global_step"]) == 10
  # 12 and 14 gone; 11 is the resumed session's.
  assert _deltas(model_dir, 8) == [10, 11]
  assert not list((model_dir / "deltas" / "8").glob("delta-1[24]*"))
  positions = reference["model/ids/_delta_positions"]
  for name in ("model/ids", "model/ids/ids", "model/ids/counts",
               "model/ids/last_seen"):
    np.testing.assert_array_equal(restored[name][positions],
                                  reference[name], err_msg=name)


@pytest.mark.parametrize("optimizer", ["adam", "lamb"])
def test_optimizers_moving_rows_not_looked_up_are_refused(tmp_path,
                                                          optimizer):
  # Adam decays every row's moments, LAMB makes the gradient dense: rows
  # no lookup marked would change unsaved.
  with pytest.raises(errors.ConfigError, match=(
      r"table 'ids': full_checkpoint_every > 1 saves the rows looked up "
      r"since the save before, but optimizer \w+ moves every row")):
    _train(_estimator(tmp_path / "model", 4, optimizer=optimizer), 2)


def test_deltas_go_with_the_full_checkpoint_they_follow(tmp_path):
  model_dir = tmp_path / "model"
  _train(_estimator(model_dir, 4, keep=2), 14)  # keeps 8 and 14
  assert sorted(os.listdir(model_dir / "deltas")) == ["8"]


def test_the_setting_is_refused_where_it_does_not_apply():
  with pytest.raises(errors.ConfigError, match=r"full_checkpoint_every=0: "
                     r"give a whole number >= 1"):
    es.build_run_config("none", full_checkpoint_every=0)
  for distribution, extra in (("mirrored", ""),
                              ("parameter_server", " without ps_sync")):
    with pytest.raises(errors.ConfigError, match=(
        r"full_checkpoint_every=4 saves deltas of the tables of one "
        r"process, of Horovod ranks or of synchronous parameter servers; "
        f"distribution='{distribution}'{extra} saves every row")):
      es.build_run_config(distribution, full_checkpoint_every=4)

