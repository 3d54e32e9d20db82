"""Model hyperparameters: declared defaults, overridden by a string that
keeps each default's type, so a typo fails before any graph is built."""
from estimator_scale import errors


def _convert(name, default, text):
  if isinstance(default, bool):
    if text.lower() in ("true", "1", "yes"):
      return True
    if text.lower() in ("false", "0", "no"):
      return False
    raise errors.ConfigError(f"hparams: {name}={text!r} is not a boolean "
                             "(use true or false)")
  try:
    if isinstance(default, int):
      return int(text)
    if isinstance(default, float):
      return float(text)
  except ValueError:
    raise errors.ConfigError(
        f"hparams: {name}={text!r} is not a valid "
        f"{type(default).__name__} (default {default!r})") from None
  if isinstance(default, (list, tuple)):
    item = default[0] if default else ""
    return type(default)(_convert(name, item, t) for t in text.split(":") if t)
  return text


def parse(defaults, overrides=""):
  """Returns `defaults` updated with `overrides` ("a=1,b=0.5", lists "u=64:32").

  Raises:
    ValueError: a malformed string or unknown name.
  """
  params = dict(defaults)
  if isinstance(overrides, dict):
    items = [(k, v) for k, v in overrides.items()]
  else:
    items = []
    for part in filter(None, (overrides or "").split(",")):
      if part.count("=") != 1 or not part.split("=")[0].strip():
        raise errors.ConfigError(
            f"hparams: malformed item {part!r}; expected "
            "name=value pairs separated by commas, e.g. "
            "'learning_rate=0.1,units=64:32'")
      key, value = part.split("=")
      items.append((key.strip(), value.strip()))
  for key, value in items:
    if key not in defaults:
      valid = ", ".join(sorted(defaults)) or "(this model has none)"
      raise errors.ConfigError(
          f"hparams: unknown hyperparameter {key!r}; valid: "
          f"{valid}")
    params[key] = _convert(key, defaults[key], value) if isinstance(
        value, str) else value
  return params
