"""tf.data options of every dataset the framework iterates during training.

TensorFlow 2.15's tuning thread (on by default) wakes at each period, which
grows to 60 s, or when its iterator is cancelled; cancelling wakes it before
the iterator counts as cancelled, so the thread often sleeps out its period,
and closing the session waits for it. Every train() and evaluate() ends by
closing one, so a process then lags the others by up to a minute, and an
elastic job re-forms its ranks only once the slowest has. Without the thread,
AUTOTUNE parallelism is the process's cores and a prefetch buffer still grows
while its consumer waits, which is all the framework's pipelines need.
"""
import tensorflow as tf


def without_tuning_thread(dataset):
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
