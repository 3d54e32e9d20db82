"""Under tf.distribute the model_fn runs as written, not converted by
autograph: the same Python code a plain Estimator runs, and the user's
error with its own traceback."""
import textwrap

from tests.helpers.processes import PYTHON, run

_JOB = textwrap.dedent('''
    import inspect, sys
    import numpy as np
    import tensorflow as tf
    import estimator_scale as es

    def model_fn(features, labels, mode):
      print("model_fn file:", inspect.currentframe().f_code.co_filename)
      def loss_fn(micro_features, micro_labels):
        logits = tf.keras.layers.Dense(2)(micro_features["x"])
        if sys.argv[1] == "fail":
          raise RuntimeError("the user's own error")
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(micro_labels,
                                                           logits))
      train = es.build_train_op(loss_fn, features, labels)
      return tf.estimator.EstimatorSpec(mode, loss=train.loss,
                                        train_op=train.train_op)

    rng = np.random.RandomState(0)
    features = {"x": rng.randn(64, 3).astype(np.float32)}
    estimator = es.make_estimator(model_fn, distribution="mirrored",
                                  model_dir=sys.argv[2])
    estimator.train(es.inputs.from_arrays(features, rng.randint(0, 2, 64),
                                          16), max_steps=2)
    ''')


def test_a_mirrored_model_fn_runs_unconverted(tmp_path):
  script = tmp_path / "job.py"
  script.write_text(_JOB)
  log = run([PYTHON, str(script), "train", str(tmp_path / "ok")], timeout=180)
  files = {line.split(": ", 1)[1] for line in log.stdout.splitlines()
           if line.startswith("model_fn file: ")}
  assert files == {str(script)}, log.stdout[-2000:]
  failed = run([PYTHON, str(script), "fail", str(tmp_path / "failed")],
               timeout=180, check=False)
  assert failed.returncode != 0
  assert "RuntimeError: the user's own error" in failed.stderr
  assert 'raise RuntimeError("the user\'s own error")' in failed.stderr
  assert "StagingError" not in failed.stderr, failed.stderr[-3000:]
