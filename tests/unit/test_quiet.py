"""The library says once why it pins TensorFlow 2.15, keeps TensorFlow's
deprecation notices for the Estimator machinery quiet, and lets the user's
own deprecated calls warn; a missing or wrong TensorFlow is one line that
says what to install."""
import os
import textwrap

import pytest

from estimator_scale import errors
from estimator_scale import stack
from estimator_scale.cli import logs
from tests.helpers.processes import PYTHON, run

# The README's library example, small: a model, make_estimator,
# from_arrays, 20 updates, one evaluation, one process. The user's own
# code calls two deprecated TensorFlow APIs: one in the model (built by
# the framework), one in the script.
EXAMPLE = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import estimator_scale as es

    class Mlp(es.ClassifierModel):
      name = "my_mlp"
      def logits(self, features, training, params):
        net = tf.keras.layers.Dense(16, activation="relu")(features["x"])
        if USER_DEPRECATED:
          net = tf.compat.v1.to_float(net)
        return tf.keras.layers.Dense(10)(net)
      def serving_features(self):
        return {"x": tf.TensorSpec([64], tf.float32)}

    USER_DEPRECATED = sys.argv[2] == "user_deprecated"
    rng = np.random.default_rng(0)
    x = rng.random((256, 64), dtype=np.float32)
    y = rng.integers(0, 10, 256)
    estimator = es.make_estimator(Mlp(), model_dir=sys.argv[1],
                                  distribution="none")
    estimator.train(es.inputs.from_arrays(
        {"x": x}, y, global_batch_size=64, topology=estimator.topology),
        max_steps=20)
    estimator.evaluate(es.inputs.from_arrays(
        {"x": x}, y, global_batch_size=64, training=False,
        topology=estimator.topology))
    if USER_DEPRECATED:
      tf.compat.v1.div(1.0, 2.0)
    print("done", int(estimator.get_variable_value("global_step")))
    """)


def _example(tmp_path, mode):
  script = tmp_path / "example.py"
  script.write_text(EXAMPLE)
  proc = run([PYTHON, str(script), str(tmp_path / "model"), mode])
  assert proc.stdout.splitlines()[-1] == "done 20"
  return script, (proc.stdout + proc.stderr).splitlines()


def _deprecations(lines):
  return [l for l in lines if "is deprecated" in l and stack.NOTICE not in l]


def test_the_library_example_says_the_pin_once_and_no_deprecation(tmp_path):
  _, lines = _example(tmp_path, "plain")
  assert _deprecations(lines) == []
  assert sum(stack.NOTICE in l for l in lines) == 1
  assert not [l for l in lines if "Instructions for updating" in l]


def test_the_users_own_deprecated_calls_still_warn(tmp_path):
  script, lines = _example(tmp_path, "user_deprecated")
  found = _deprecations(lines)
  assert len(found) == 2, "\n".join(lines)
  assert all(f"From {script}:" in l for l in found), found
  assert "to_float" in found[0] and "div" in found[1]
  assert sum(stack.NOTICE in l for l in lines) == 1


@pytest.fixture
def tf_records(caplog):
  """The messages of TensorFlow's log records that pass its logger's
  filters (the logger passes its records on to the root's, caplog's)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert tf.get_logger().propagate
  stack.quiet()
  return lambda: [r.getMessage() for r in caplog.records
                  if r.name == "tensorflow"]


def _call_from(path, function):
  """Calls `function` from code whose file is `path` (its call site)."""
  code = compile("function()", path, "eval")
  return eval(code, {"function": function})  # pylint: disable=eval-used


def test_a_call_the_framework_made_first_still_warns_the_user(tf_records):
  from tensorflow.python.util import deprecation  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  old_api = deprecation.deprecated(None, "Use new_api instead.")(lambda: 1)
  framework_file = os.path.join(os.path.dirname(stack.__file__), "model.py")
  assert _call_from(framework_file, old_api) == 1
  assert _call_from(framework_file, old_api) == 1
  assert tf_records() == []
  assert old_api() == 1
  assert old_api() == 1  # once per API, as TensorFlow gives it
  (notice,) = tf_records()
  assert f"From {__file__}:" in notice and "Use new_api instead." in notice


def test_a_tf_estimator_symbol_is_quiet_from_the_users_code(tf_records):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.estimator.CheckpointSaverHook("/tmp/unused", save_steps=1)
  assert tf_records() == []


def _without_tensorflow(code):
  """Runs `code` in a Python that cannot import TensorFlow."""
  return run([PYTHON, "-c", "import sys\n"
              "sys.modules['tensorflow'] = None  # as if not installed\n"
              + textwrap.dedent(code)], check=False)


def test_without_tensorflow_the_library_says_what_to_install():
  proc = _without_tensorflow("""
      import estimator_scale as es
      es.errors  # needs no TensorFlow
      es.make_estimator
      """)
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("ImportError: estimator_scale needs TensorFlow 2.15")
  assert "pip install tensorflow-cpu==2.15.1" in last
  assert "tensorflow==2.15.1" in last


def test_without_tensorflow_the_cli_says_so_in_one_line():
  proc = _without_tensorflow("""
      from estimator_scale.cli import __main__ as cli
      sys.argv = ["estimator-scale", "models"]
      cli.run()
      """)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      "estimator-scale: error: estimator_scale needs TensorFlow 2.15 (the "
      f"last release with tf.estimator) and found none: {stack.INSTALL}; see "
      f"{stack.GUIDE}"]


def test_another_tensorflow_is_named(monkeypatch):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tf, "__version__", "2.16.1")
  with pytest.raises(ImportError, match=r"found TensorFlow 2\.16\.1: pip "
                     r"install tensorflow-cpu==2\.15\.1"):
    stack.require_tensorflow()
  with pytest.raises(errors.ConfigError, match="found TensorFlow 2.16.1"):
    logs.configure()
