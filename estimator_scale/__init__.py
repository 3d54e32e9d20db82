"""estimator_scale: TensorFlow Estimator training that scales.

The public API; nothing else in the package is meant to be imported by users.
"""
import os

# TensorFlow's C++ INFO lines (oneDNN notice, CPU features, MLIR pass) print
# once per process before any flag is read; warnings and errors still show.
# Set TF_CPP_MIN_LOG_LEVEL=0 to see them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from estimator_scale import errors
from estimator_scale import inputs
from estimator_scale.estimator import Estimator
from estimator_scale.estimator import make_estimator
from estimator_scale.evaluation import EarlyStoppingHook
from estimator_scale.evaluation import stop_if_no_decrease
from estimator_scale.evaluation import stop_if_no_increase
from estimator_scale.evaluation import train_and_evaluate
from estimator_scale.hooks import ProgressHook
from estimator_scale.hooks import StopAtProgressHook
from estimator_scale.model import BaseModel
from estimator_scale.model import ClassifierModel
from estimator_scale.model import RegressionModel
from estimator_scale.model_fn import make_model_fn
from estimator_scale.registry import register
from estimator_scale.backends.base import ScaleConfig
from estimator_scale.run_config import build_run_config
from estimator_scale.topology import Topology
from estimator_scale.topology import TopologyError
from estimator_scale.train_ops.adascale import GAIN as ADASCALE_GAIN
from estimator_scale.train_ops.adascale import PROGRESS as ADASCALE_PROGRESS
from estimator_scale.train_ops.adascale import SCALE as ADASCALE_SCALE
from estimator_scale.train_ops.pipeline import TrainOp
from estimator_scale.train_ops.pipeline import TrainingConfig
from estimator_scale.train_ops.pipeline import build_train_op
from estimator_scale.train_ops.schedules import Schedule

__all__ = [
    "ADASCALE_GAIN", "ADASCALE_PROGRESS", "ADASCALE_SCALE",
    "BaseModel", "ClassifierModel", "EarlyStoppingHook", "Estimator",
    "ProgressHook",
    "RegressionModel", "Schedule", "ScaleConfig", "StopAtProgressHook",
    "Topology", "TopologyError", "TrainOp", "TrainingConfig",
    "build_run_config", "build_train_op", "errors", "inputs",
    "make_estimator", "make_model_fn", "register", "stop_if_no_decrease",
    "stop_if_no_increase", "train_and_evaluate",
]
