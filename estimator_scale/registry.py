"""Model registry: names the CLI and the contract test iterate over.

It imports no model (the zoo imports the framework): import `model_zoo`.
"""
import importlib

from estimator_scale import errors

_MODELS = {}


def register(cls):
  """Class decorator: registers a BaseModel subclass under `cls.name`."""
  if not cls.name:
    raise errors.ConfigError(f"{cls.__name__} needs a `name` to be registered")
  if _MODELS.get(cls.name, cls) is not cls:
    raise errors.ConfigError(
        f"model name {cls.name!r} is already registered by "
        f"{_MODELS[cls.name].__name__}")
  _MODELS[cls.name] = cls
  return cls


def load_module(module):
  """Imports a user module that registers models (`--model_module`)."""
  try:
    importlib.import_module(module)
  except ImportError as e:
    raise errors.ConfigError(
        f"model_module={module!r} cannot be imported: {e}") from None


def names():
  """Sorted names of the registered models."""
  return sorted(_MODELS)


def get(name):
  """A new instance of the model registered as `name`."""
  if name not in _MODELS:
    raise errors.ConfigError(
        f"model={name!r} is not a registered model; valid: "
        f"{', '.join(sorted(_MODELS))} (or register your own and "
        "pass model_module=your.module)")
  return _MODELS[name]()


def describe(name):
  """The first line of a model's docstring."""
  return (_MODELS[name].__doc__ or "").strip().splitlines()[0]
