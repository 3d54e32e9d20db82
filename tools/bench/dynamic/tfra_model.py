"""The bench's model on TFRA's dynamic_embedding, trained as TFRA's own
Estimator demos train: a plain `tf.estimator.Estimator` whose model_fn
looks ids up in `de.get_variable` tables and minimises through
`de.DynamicEmbeddingOptimizer`.

TFRA's tables have no capacity: they hold every id they are given, so
"rows in use" is the number of distinct ids trained on.
"""
import tensorflow as tf

HIDDEN = 32


def estimator(columns, dimension, learning_rate, model_dir, seed=0):
  """(Estimator, hook factory): the hook's `end` records the tables' rows
  in use into the list it is given."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_recommenders_addons import dynamic_embedding as de
  sizes = []

  class Rows(tf.estimator.SessionRunHook):
    def __init__(self, fetch):
      self.fetch = fetch

    def end(self, session):
      sizes.append(int(session.run(self.fetch)))

  def model_fn(features, labels, mode):
    training = mode == tf.estimator.ModeKeys.TRAIN
    vectors, tables = [], []
    for name in columns:
      ids = tf.reshape(features[name], [-1])
      table = de.get_variable(
          f"{name}_table", key_dtype=tf.int64, value_dtype=tf.float32,
          dim=dimension, initializer=tf.keras.initializers.RandomUniform(
              -dimension ** -0.5, dimension ** -0.5),
          trainable=training)
      tables.append(table)
      if training:
        found = de.embedding_lookup_unique(table, ids, name=f"{name}_lookup")
      else:
        # An id never trained reads zeros, as in the tables it is compared
        # with; TFRA would draw it a random vector at each lookup.
        found, known = table.lookup(ids, return_exists=True)
        found *= tf.cast(known, tf.float32)[:, None]
      vectors.append(found * tf.cast(ids >= 0, tf.float32)[:, None])
    net = tf.compat.v1.layers.dense(tf.concat(vectors, 1), HIDDEN,
                                    tf.nn.relu, name="hidden")
    logits = tf.compat.v1.layers.dense(net, 1, name="logit")
    if mode == tf.estimator.ModeKeys.PREDICT:
      return tf.estimator.EstimatorSpec(
          mode, predictions={"logistic": tf.sigmoid(logits)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1, 1]), tf.float32),
        logits=logits))
    optimizer = de.DynamicEmbeddingOptimizer(
        tf.compat.v1.train.AdagradOptimizer(learning_rate))
    train_op = optimizer.minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    rows = tf.add_n([table.size() for table in tables])
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      training_hooks=[Rows(rows)])

  config = tf.estimator.RunConfig(tf_random_seed=seed,
                                  save_checkpoints_steps=10 ** 9,
                                  save_checkpoints_secs=None)
  return tf.estimator.Estimator(model_fn, model_dir, config=config), sizes
