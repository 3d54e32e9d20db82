"""estimator_scale.filesystems: a path's file system, loaded or named.

The registry of schemes is faked where the answer must not depend on
whether an earlier test imported tensorflow-io into this process.
"""
import sys
import types

import pytest
import tensorflow as tf

from estimator_scale import errors
from estimator_scale import filesystems

BUILT_IN = {"", "file", "gs", "ram"}


@pytest.fixture
def without_tensorflow_io(monkeypatch):
  """A process where TF has its own schemes only and tensorflow_io cannot
  be imported."""
  monkeypatch.setattr(filesystems, "_registered", lambda: set(BUILT_IN))
  monkeypatch.setitem(sys.modules, "tensorflow_io", None)


@pytest.mark.parametrize("path,scheme", [
    ("s3://bucket/run", "s3"), ("HDFS://nn:8020/x", "hdfs"),
    ("gs://b/data-*.tfrecord", "gs"), ("/tmp/run", ""), ("run", ""),
    ("C:/run", ""), ("ram://digits", "ram")])
def test_scheme(path, scheme):
  assert filesystems.scheme(path) == scheme


@pytest.mark.parametrize("path", [None, "", "/tmp/run", "ram://x/y",
                                  "gs://bucket/run", "file:///tmp/run"])
def test_paths_tensorflow_opens_itself_load_nothing(without_tensorflow_io,
                                                    path):
  filesystems.require("model_dir", path)
  assert sys.modules["tensorflow_io"] is None


def test_an_s3_path_without_the_extra_is_one_line_naming_it(
    without_tensorflow_io):
  with pytest.raises(errors.ConfigError) as raised:
    filesystems.require("model_dir", "s3://bucket/run")
  assert str(raised.value) == (
      "model_dir=s3://bucket/run needs the s3 file system of tensorflow-io: "
      "pip install tensorflow-io==0.36.0")


def test_a_tensorflow_io_that_registers_nothing_is_named(monkeypatch):
  monkeypatch.setattr(filesystems, "_registered", lambda: set(BUILT_IN))
  monkeypatch.setitem(sys.modules, "tensorflow_io",
                      types.ModuleType("tensorflow_io"))
  with pytest.raises(errors.ConfigError,
                     match=r"^train_data=hdfs://nn/d-\*: tensorflow_io is "
                           r"installed but registered no hdfs file system"):
    filesystems.require("train_data", "hdfs://nn/d-*")


def test_a_scheme_no_one_offers_lists_those_that_exist(without_tensorflow_io):
  with pytest.raises(errors.ConfigError) as raised:
    filesystems.require("export_dir", "ftp://host/models")
  message = str(raised.value)
  assert message.startswith("export_dir=ftp://host/models: TensorFlow has "
                            "no file system for ftp://; built in: file, gs, "
                            "ram, and with tensorflow-io: s3, hdfs")
  assert "\n" not in message


def test_an_s3_path_imports_tensorflow_io_where_installed():
  pytest.importorskip("tensorflow_io")
  filesystems.require("model_dir", "s3://bucket/run")
  assert filesystems.io_loaded()
  assert "s3" in tf.io.gfile.get_registered_schemes()


@pytest.mark.parametrize("code,status", [(None, 0), (0, 0), (2, 2),
                                         ("bad flag", 1)])
def test_exit_status_is_what_sys_exit_would_give(code, status):
  assert filesystems.exit_status(code) == status
