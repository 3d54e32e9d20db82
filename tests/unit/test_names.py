"""Names that say what they are: the new names work, each old one still
works for one release with one line naming its new name, and one condition
raises one error type.

S is `batch_scale` (`scale` read as the ScaleConfig that `build_run_config`
returns), and every flag of the framework's commands is spelled with
underscores.
"""
import argparse
import logging
import re

from absl.testing import flagsaver
import pytest

import estimator_scale as es
from estimator_scale import deprecation
from estimator_scale.cli import flags as cli_flags
from estimator_scale.launcher import __main__ as launcher_main

NEW_LAUNCHER_FLAGS = ["--max_restarts", "2", "--min_workers", "1",
                      "--probe_every", "0.5", "--model_dir", "/tmp/run"]


@pytest.fixture
def notices(caplog):
  """The deprecation lines logged so far (absl's records reach caplog's
  handler)."""
  caplog.set_level(logging.WARNING)
  return lambda: [r.getMessage() for r in caplog.records
                  if r.pathname == deprecation.__file__]


def test_training_config_takes_batch_scale_quietly(notices):
  config = es.TrainingConfig(lr_scaling="linear", batch_scale=4)
  assert config.batch_scale == 4 and notices() == []


def test_training_config_scale_is_batch_scale_with_one_line(notices):
  config = es.TrainingConfig(lr_scaling="linear", scale=4)
  assert config == es.TrainingConfig(lr_scaling="linear", batch_scale=4)
  assert notices() == ["TrainingConfig(scale=) is deprecated and goes in "
                       "the next release; use batch_scale="]
  assert not re.search(r"\bscale=", repr(config))


def test_training_config_refuses_both_names():
  with pytest.raises(es.errors.UsageError,
                     match=r"TrainingConfig\(scale=\) is the old name of "
                     "batch_scale=; pass batch_scale= only"):
    es.TrainingConfig(scale=2, batch_scale=4)


def test_canned_optimizer_scale_is_batch_scale_with_one_line(notices):
  new = es.canned_optimizer("SGD", es.Topology(), lr_scaling="linear",
                            batch_scale=4)
  assert new.plan.batch_scale == 4.0 and notices() == []
  old = es.canned_optimizer("SGD", es.Topology(), lr_scaling="linear",
                            scale=4)
  assert old.plan.batch_scale == 4.0
  (line,) = notices()
  assert line.startswith("canned_optimizer(scale=) is deprecated")
  assert line.endswith("use batch_scale=")


def test_cli_scale_flag_sets_batch_scale_with_one_line(notices):
  with flagsaver.flagsaver():
    cli_flags.FLAGS["scale"].parse("4")
    cli_flags.take_renamed_flags()
    assert cli_flags.FLAGS["batch_scale"].value == 4.0
  assert notices() == ["--scale is deprecated and goes in the next release; "
                       "use --batch_scale"]


def test_cli_refuses_scale_and_batch_scale_together():
  with flagsaver.flagsaver():
    cli_flags.FLAGS["scale"].parse("4")
    cli_flags.FLAGS["batch_scale"].parse("2")
    with pytest.raises(es.errors.UsageError, match="pass --batch_scale only"):
      cli_flags.take_renamed_flags()


def test_launcher_takes_underscore_flags_quietly(capsys):
  args = launcher_main._parser().parse_args(NEW_LAUNCHER_FLAGS + ["--", "x"])
  assert (args.max_restarts, args.min_workers, args.probe_every,
          args.model_dir) == (2, 1, 0.5, "/tmp/run")
  assert capsys.readouterr().err == ""


def test_launcher_hyphen_flags_set_the_same_values_with_one_line_each(
    capsys):
  hyphens = [word.replace("_", "-") if word.startswith("--") else word
             for word in NEW_LAUNCHER_FLAGS]
  parser = launcher_main._parser()
  assert parser.parse_args(hyphens) == parser.parse_args(NEW_LAUNCHER_FLAGS)
  lines = capsys.readouterr().err.splitlines()
  assert lines == [
      f"estimator-scale-launch: {old} is deprecated and goes in the next "
      f"release; use --{old[2:].replace('-', '_')}"
      for old in ("--max-restarts", "--min-workers", "--probe-every",
                  "--model-dir")]


def test_launcher_help_shows_only_the_underscore_flags():
  usage = launcher_main._parser().format_help()
  assert "--max_restarts" in usage and "--max-restarts" not in usage


def test_a_renamed_switch_and_optional_value_store_as_their_flag(capsys):
  parser = argparse.ArgumentParser(prog="rig")
  deprecation.add_renamed_flag(parser, "--loopback_hostname",
                               "--loopback-hostname", action="store_true")
  deprecation.add_renamed_flag(parser, "--local_disk", "--local-disk",
                               nargs="?", const="/mnt/local")
  assert vars(parser.parse_args(["--loopback-hostname", "--local-disk"])) == {
      "loopback_hostname": True, "local_disk": "/mnt/local"}
  assert parser.parse_args(["--local-disk", "/d"]).local_disk == "/d"
  assert vars(parser.parse_args([])) == {"loopback_hostname": False,
                                         "local_disk": None}
  assert len(capsys.readouterr().err.splitlines()) == 3


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
