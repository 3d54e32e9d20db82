"""estimator_scale: TensorFlow Estimator training that scales.

The public API, each name imported on first touch (the launcher must not
load TensorFlow).
"""
import importlib
import os

# TensorFlow's C++ INFO lines (oneDNN notice, CPU features, MLIR pass) print
# once per process before any flag is read; warnings and errors still show.
# Set TF_CPP_MIN_LOG_LEVEL=0 to see them. Set here, before any submodule
# can import TensorFlow, because TensorFlow reads it once, when it loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

_PUBLIC = {
    # name: (module, attribute in it; None for the module itself)
    "ADASCALE_GAIN": ("estimator_scale.train_ops.adascale", "GAIN"),
    "ADASCALE_PROGRESS": ("estimator_scale.train_ops.adascale", "PROGRESS"),
    "ADASCALE_SCALE": ("estimator_scale.train_ops.adascale", "SCALE"),
    "BaseModel": ("estimator_scale.model", "BaseModel"),
    "BinaryClassifierModel": ("estimator_scale.model", "BinaryClassifierModel"),
    "ClassifierModel": ("estimator_scale.model", "ClassifierModel"),
    "CompactExport": ("estimator_scale.embeddings.compact", "CompactExport"),
    "DynamicEmbedding": ("estimator_scale.embeddings.dynamic_layers",
                         "DynamicEmbedding"),
    "EarlyStoppingHook": ("estimator_scale.evaluation", "EarlyStoppingHook"),
    "Estimator": ("estimator_scale.estimator", "Estimator"),
    "ProgressHook": ("estimator_scale.hooks", "ProgressHook"),
    "RegressionModel": ("estimator_scale.model", "RegressionModel"),
    "ScaleConfig": ("estimator_scale.backends.base", "ScaleConfig"),
    "ShardedEmbedding": ("estimator_scale.embeddings.sharded_layers",
                         "ShardedEmbedding"),
    "StopAtProgressHook": ("estimator_scale.hooks", "StopAtProgressHook"),
    "Topology": ("estimator_scale.topology", "Topology"),
    "TopologyError": ("estimator_scale.topology", "TopologyError"),
    "TrainOp": ("estimator_scale.train_ops.pipeline", "TrainOp"),
    "TrainingConfig": ("estimator_scale.train_ops.pipeline", "TrainingConfig"),
    "build_run_config": ("estimator_scale.run_config", "build_run_config"),
    "build_train_op": ("estimator_scale.train_ops.pipeline", "build_train_op"),
    "canned_optimizer": ("estimator_scale.canned", "canned_optimizer"),
    "dynamic_embedding": ("estimator_scale.embeddings.dynamic",
                          "dynamic_embedding"),
    "dynamic_embedding_column": ("estimator_scale.embeddings.dynamic_layers",
                                 "dynamic_embedding_column"),
    "errors": ("estimator_scale.errors", None),
    "inputs": ("estimator_scale.inputs", None),
    "linear_part": ("estimator_scale.train_ops.parts", "linear_part"),
    "make_estimator": ("estimator_scale.estimator", "make_estimator"),
    "make_model_fn": ("estimator_scale.model_fn", "make_model_fn"),
    "register": ("estimator_scale.registry", "register"),
    "run_elastic": ("estimator_scale.backends.horovod.elastic", "run"),
    "sharded_embedding": ("estimator_scale.embeddings.sharded",
                          "sharded_embedding"),
    "sharded_embedding_column": ("estimator_scale.embeddings.sharded_layers",
                                 "sharded_embedding_column"),
    "stop_if_no_decrease": ("estimator_scale.evaluation",
                            "stop_if_no_decrease"),
    "stop_if_no_increase": ("estimator_scale.evaluation",
                            "stop_if_no_increase"),
    "train_and_evaluate": ("estimator_scale.evaluation", "train_and_evaluate"),
    "train_by_day": ("estimator_scale.by_day", "train_by_day"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
  """Imports a public name's module on first touch (quieting and checking TF,
  stack.py); else AttributeError, as `from ... import submodule` needs."""
  if name not in _PUBLIC:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  module_name, attribute = _PUBLIC[name]
  # Lazy, as every public name: loads no TensorFlow (see stack.py).
  from estimator_scale import stack  # pylint: disable=g-import-not-at-top
  stack.quiet()
  try:
    value = importlib.import_module(module_name)
  except Exception as e:  # pylint: disable=broad-except
    stack.loaded(e)  # a missing or wrong TensorFlow: one line saying so
    raise
  stack.loaded()
  if attribute is not None:
    value = getattr(value, attribute)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
