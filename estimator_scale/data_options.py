"""tf.data options of every dataset the framework iterates during training.

TF 2.15's autotune thread sleeps up to 60 s and closing a session waits
for it, leaving a process up to a minute behind, so it is off; AUTOTUNE
still uses the process's cores.
"""
import tensorflow as tf


def without_tuning_thread(dataset):
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
