"""tf.data options of every dataset the framework iterates during training.

TF 2.15's autotune thread sleeps up to 60 s and closing a session waits
for it, so each train()/evaluate() could leave a process up to a minute
behind the others (and an elastic job re-forms only once the slowest has).
Without it AUTOTUNE uses the process's cores and prefetch buffers still
grow, which is all the framework's pipelines need.
"""
import tensorflow as tf


def without_tuning_thread(dataset):
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
