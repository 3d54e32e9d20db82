"""Model registry: names the CLI and the contract test iterate over."""
import importlib

_MODELS = {}


def register(cls):
  """Class decorator: registers a BaseModel subclass under `cls.name`."""
  if not cls.name:
    raise ValueError(f"{cls.__name__} needs a `name` to be registered")
  if _MODELS.get(cls.name, cls) is not cls:
    raise ValueError(f"model name {cls.name!r} is already registered by "
                     f"{_MODELS[cls.name].__name__}")
  _MODELS[cls.name] = cls
  return cls


def load_module(module):
  """Imports a user module that registers models (`--model_module`)."""
  try:
    importlib.import_module(module)
  except ImportError as e:
    raise ValueError(f"--model_module={module!r} cannot be imported: {e}") from None


def _load_zoo():
  importlib.import_module("model_zoo")


def names():
  """Sorted names of the registered models (the model zoo included)."""
  _load_zoo()
  return sorted(_MODELS)


def get(name):
  """A new instance of the model registered as `name`."""
  _load_zoo()
  if name not in _MODELS:
    raise ValueError(f"--model={name!r} is not a registered model; valid: "
                     f"{', '.join(sorted(_MODELS))} (or register your own and "
                     "pass --model_module)")
  return _MODELS[name]()


def describe(name):
  """The first line of a model's docstring."""
  _load_zoo()
  return (_MODELS[name].__doc__ or "").strip().splitlines()[0]
