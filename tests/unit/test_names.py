"""Names that say what they are, and one condition raises one error type.

S is `batch_scale` (`scale` read as the ScaleConfig that `build_run_config`
returns), every flag of the framework's commands is spelled with
underscores, and the library takes a training setting under its flag's name.
"""
import dataclasses

from absl.testing import flagsaver
import pytest

import estimator_scale as es
from estimator_scale.cli import estimators as cli_estimators
from estimator_scale.cli import flags as cli_flags
from estimator_scale.launcher import __main__ as launcher_main

OPTION_FIELDS = ("optimizer_options", "linear_optimizer_options")
"""TrainingConfig fields the optimizers' own flags fill (--momentum, ...)."""

NEW_LAUNCHER_FLAGS = ["--max_restarts", "2", "--min_workers", "1",
                      "--probe_every", "0.5", "--model_dir", "/tmp/run"]


def test_training_config_and_canned_optimizer_take_batch_scale():
  assert es.TrainingConfig(lr_scaling="linear", batch_scale=4).batch_scale == 4
  canned = es.canned_optimizer("SGD", es.Topology(), lr_scaling="linear",
                               batch_scale=4)
  assert canned.plan.config.resolved_scale(es.Topology()) == 4.0


def test_training_config_takes_the_command_lines_names():
  config = es.TrainingConfig(optimizer="adagrad", learning_rate=0.05)
  assert (config.optimizer, config.learning_rate) == ("adagrad", 0.05)
  names = [field.name for field in dataclasses.fields(es.TrainingConfig)]
  assert [name for name in names
          if name not in cli_flags.FLAGS and name not in OPTION_FIELDS] == []


def test_the_command_line_builds_the_schedule_from_its_flags():
  if not cli_flags.FLAGS.is_parsed():
    cli_flags.FLAGS.mark_as_parsed()
  schedule = dict(learning_rate=0.5, lr_schedule="polynomial",
                  lr_decay_rate=0.5, lr_decay_steps=100, lr_power=2.0,
                  warmup_steps=10)
  with flagsaver.flagsaver(lr_boundaries=["5", "7"], **schedule):
    config = cli_estimators.training_config_from_flags()
  assert config.lr_boundaries == (5, 7)
  assert {name: getattr(config, name) for name in schedule} == schedule


def test_launcher_takes_underscore_flags_quietly(capsys):
  args = launcher_main._parser().parse_args(NEW_LAUNCHER_FLAGS + ["--", "x"])
  assert (args.max_restarts, args.min_workers, args.probe_every,
          args.model_dir) == (2, 1, 0.5, "/tmp/run")
  assert capsys.readouterr().err == ""


def test_launcher_help_shows_only_the_underscore_flags():
  usage = launcher_main._parser().format_help()
  assert "--max_restarts" in usage and "--max-restarts" not in usage


def test_a_model_fn_estimator_refuses_every_base_model_method_alike(tmp_path):
  """What only a BaseModel gives (its data, its feature spec, its serving
  inputs) is one condition on an Estimator around a model_fn: one type."""
  estimator = es.make_estimator(lambda features, labels, mode: None,
                                model_dir=str(tmp_path))
  calls = [lambda: estimator.model_input_fn("train", 8),
           lambda: estimator.files_input_fn("*.tfrecord", "train", 8),
           lambda: estimator.export_saved_model(str(tmp_path / "export"))]
  for call in calls:
    with pytest.raises(es.errors.UsageError, match="model_fn"):
      call()
