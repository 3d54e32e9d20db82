"""The dynamic tables' kernel is built where it is missing, once, and a
build that cannot happen says why and what to do, when a table is made."""
import os

import pytest
import tensorflow as tf

from estimator_scale import environment
from estimator_scale import errors
from estimator_scale.embeddings import dynamic
from estimator_scale.embeddings import native


def test_a_missing_compiler_is_named(tmp_path, monkeypatch):
  monkeypatch.setenv(environment.KERNELS, str(tmp_path))
  monkeypatch.setenv("CXX", "no-such-compiler")
  with pytest.raises(errors.ConfigError, match="'no-such-compiler' is not on "
                     "PATH.*install g\\+\\+"):
    native.build()


def test_a_directory_that_cannot_be_written_names_the_variable(
    tmp_path, monkeypatch):
  blocked = tmp_path / "file"
  blocked.write_text("")
  monkeypatch.setenv(environment.KERNELS, str(blocked / "kernels"))
  with pytest.raises(errors.ConfigError,
                     match=f"{blocked}/kernels.*set {environment.KERNELS}"):
    native.build()


def test_a_build_replaces_the_library_of_an_older_source(tmp_path,
                                                         monkeypatch):
  monkeypatch.setenv(environment.KERNELS, str(tmp_path))
  old = tmp_path / "dynamic_rows-0123456789abcdef.so"
  old.write_text("")
  path = native.build()
  assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path)
  assert not old.exists()
  assert native.build() == path  # built once


def test_a_table_that_cannot_be_built_says_why(tmp_path, monkeypatch):
  monkeypatch.setenv(environment.KERNELS, str(tmp_path))
  monkeypatch.setenv("CXX", "no-such-compiler")
  native.ops.cache_clear()
  try:
    with tf.Graph().as_default(), pytest.raises(
        errors.ConfigError, match="dynamic tables: building .*no-such"):
      dynamic.make_table("t", dynamic.Options(4, 10))
  finally:
    native.ops.cache_clear()
