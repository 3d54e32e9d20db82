"""The studies' pool of training processes: each run's error comes back as
its traceback's text, since a TensorFlow error holds graph objects a pool
cannot send back (the caller would see only "cannot pickle 'Operation'")."""
import functools
import traceback


def _call(train, spec):
  try:
    return spec, train(spec), None
  except Exception:  # pylint: disable=broad-except
    return spec, None, traceback.format_exc()


def each_run(pool, train, specs):
  """(spec, result, None) or (spec, None, traceback) for each of `specs` as
  it ends, from `pool` (or this process when it is None)."""
  call = functools.partial(_call, train)
  return pool.imap_unordered(call, specs) if pool else map(call, specs)
