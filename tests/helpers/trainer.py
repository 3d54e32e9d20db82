"""How the in-process tests train: one Estimator recipe for every test file.

Tests that compare two runs (accumulation against one large batch, a resumed
run against an uninterrupted one) are only meaningful when both runs differ
in the one setting under test. So every run here starts from the same seed,
reads the arrays in order (no shuffling) and gets the same constant learning
rate unless a test names another; the two sides of a comparison then differ
only in the keyword arguments the test passes.
"""
import tensorflow as tf

import estimator_scale as es


def make_estimator(model, model_dir, learning_rate=0.1,
                   scale_invariant_steps=None, **training_config):
  """The Estimator of `model` in `model_dir`, seeded, on one process.

  Args:
    model: a BaseModel instance.
    model_dir: where checkpoints go (a str or a path); a second call with the
      same directory resumes from its last checkpoint.
    learning_rate: the `es.TrainingConfig` rate (a constant one unless
      `training_config` names a schedule).
    scale_invariant_steps: stop once AdaScale's progress reaches this.
    **training_config: the remaining `es.TrainingConfig` arguments.
  """
  training = es.TrainingConfig(learning_rate=learning_rate,
                               **training_config)
  return es.make_estimator(model, model_dir=str(model_dir),
                           training_config=training, random_seed=0,
                           scale_invariant_steps=scale_invariant_steps)


def array_input(features, labels, global_batch, accumulation_steps=1,
                one_pass=False):
  """An input_fn over the arrays, in their order.

  Args:
    features, labels: as `es.inputs.from_arrays` takes them.
    global_batch: examples per update.
    accumulation_steps: micro-batches per update, which must divide it.
    one_pass: read the arrays once and end (an input that runs out) instead
      of repeating them.
  """
  if one_pass:
    return es.inputs.from_arrays(features, labels, global_batch,
                                 training=False)
  return es.inputs.from_arrays(features, labels, global_batch, seed=None,
                               accumulation_steps=accumulation_steps)


def train(model, features, labels, model_dir, global_batch, steps,
          hooks=None, **config):
  """Trains `model` on the arrays up to update `steps`; returns the Estimator.

  Args:
    model, model_dir: as for `make_estimator`.
    features, labels, global_batch: as for `array_input`.
    steps: the update to stop at (`max_steps`): a run in a `model_dir` that
      holds a checkpoint continues from it up to this update.
    hooks: extra SessionRunHooks for `train`.
    **config: `make_estimator`'s keyword arguments (learning_rate,
      scale_invariant_steps and the TrainingConfig's).
  """
  estimator = make_estimator(model, model_dir, **config)
  accumulation_steps = estimator.training_config.accumulation_steps
  estimator.train(array_input(features, labels, global_batch,
                              accumulation_steps),
                  hooks=hooks, max_steps=steps)
  return estimator


class GainRecorder(tf.compat.v1.train.SessionRunHook):
  """Records AdaScale's gain after every update, in `gains`.

  Each gain is read in a session run of its own after the update's run: a
  variable fetched in the same run as its assignment may be read before or
  after it, since the two ops are not ordered.
  """

  def __init__(self):
    self.gains = []
    self._read = None

  def begin(self):
    gain, = [v for v in tf.compat.v1.global_variables()
             if v.op.name == "adascale/gain"]
    self._read = gain.read_value()

  def after_run(self, run_context, run_values):
    self.gains.append(float(run_context.session.run(self._read)))
