"""Renamed arguments and flags: the old name keeps working for one release.

Each use of an old name gets one line naming the new one, worded here once
(`notice`): a keyword argument of the library logs it through absl
(`renamed_keywords`, `renamed_value`), a flag of the command line too
(cli/flags.py), and a flag of an argparse command prints it on stderr
(`add_renamed_flag`), as argparse prints its own errors. Python's
DeprecationWarning is not used: it is hidden by default, and the command
line silences it for TensorFlow's sake.
"""
import argparse
import functools
import sys

from absl import logging

from estimator_scale import errors


def notice(old, new):
  """The line a use of the old name `old` gets: which name to use."""
  return f"{old} is deprecated and goes in the next release; use {new}"


def renamed_value(old, new, old_value, new_value):
  """The value given under `old`, the old name of `new`, after one line
  naming `new`.

  Args:
    old, new: the names as the user writes them (`canned_optimizer(scale=)`
      and `batch_scale=`, or `--scale` and `--batch_scale`).
    old_value: the value given under `old`.
    new_value: the value given under `new` (None: not given).

  Raises:
    errors.UsageError: both names given.
  """
  if new_value is not None:
    raise errors.UsageError(f"{old} is the old name of {new}; pass {new} only")
  logging.warning(notice(old, new))
  return old_value


def renamed_keywords(**renames):
  """Decorator: `function` also takes each old keyword (renames: old=new).

  The function's own signature has the new names only, so `help()` and
  `inspect.signature` show those.
  """

  def decorate(function):

    @functools.wraps(function)
    def with_old_keywords(*args, **kwargs):
      for old, new in renames.items():
        if old in kwargs:
          kwargs[new] = renamed_value(f"{function.__name__}({old}=)",
                                      f"{new}=", kwargs.pop(old),
                                      kwargs.get(new))
      return function(*args, **kwargs)

    return with_old_keywords

  return decorate


def add_renamed_flag(parser, name, old_name, **kwargs):
  """`parser.add_argument(name, **kwargs)`, and `old_name`, the flag's old
  spelling, for one release: hidden from --help, it sets the same value
  after one line on stderr naming `name`.
  """
  flag = parser.add_argument(name, **kwargs)
  parser.add_argument(old_name, dest=flag.dest, nargs=flag.nargs,
                      const=flag.const, type=flag.type, action=_RenamedFlag,
                      help=argparse.SUPPRESS)


class _RenamedFlag(argparse.Action):
  """A flag's old spelling: stores what the flag would, after the notice.

  A switch (nargs=0) stores its const (True for `store_true`), a flag with
  an optional value (nargs="?") given none its const, as argparse does.
  """

  def __call__(self, parser, namespace, values, option_string=None):
    print(f"{parser.prog}: {notice(option_string, '--' + self.dest)}",
          file=sys.stderr)
    setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
