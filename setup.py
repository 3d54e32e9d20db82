"""Installs estimator_scale and its example model zoo.

Versions come from constraints.txt, the stack's one list of pins, so that
`pip install .` and the project's setup script cannot disagree.
"""
import os
import re

import setuptools

_HERE = os.path.dirname(os.path.abspath(__file__))


def _pins():
  """{package name: its requirement line} from constraints.txt."""
  pins = {}
  with open(os.path.join(_HERE, "constraints.txt"), encoding="utf-8") as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if line:
        name = re.split(r"[\[<>=!~;]", line, maxsplit=1)[0].strip().lower()
        pins[name] = line
  return pins


_PINS = _pins()


def _pinned(requirement, marker=""):
  """`requirement` ("name" or "name[extras]") with the version constraints.txt
  gives its name (none where it gives none); pip's constraints take no extras,
  so they are added here."""
  name, bracket, extras = requirement.partition("[")
  pinned = _PINS.get(name, name)
  if bracket:
    pinned = name + bracket + extras + pinned[len(name):]
  return pinned + (f"; {marker}" if marker else "")


setuptools.setup(
    name="estimator_scale",
    version="0.1.0",
    description="Scale TensorFlow Estimator training: sharding, accumulation, "
    "large-batch lr scaling and AdaScale over tf.distribute and Horovod.",
    packages=setuptools.find_packages(include=["estimator_scale", "estimator_scale.*",
                                               "model_zoo", "model_zoo.*"]),
    python_requires=">=3.9,<3.12",
    install_requires=[
        _pinned("tensorflow-cpu", "platform_machine=='x86_64'"),
        _pinned("tensorflow-estimator"),
        _pinned("keras"),
        _pinned("numpy"),
        _pinned("absl-py"),
        _pinned("scikit-learn"),
    ],
    extras_require={
        "horovod": [_pinned("horovod")],
        "plots": [_pinned("matplotlib")],
        # python -m tools.datasets: the census data is a parquet file.
        "datasets": [_pinned("pyarrow")],
        # s3:// and hdfs:// paths: TensorFlow 2.15 has no file system for
        # them; this release of tensorflow-io is the one built for it.
        "s3": [_pinned("tensorflow-io")],
        # What the tests start besides the package: pytest (and its runner
        # over several cores) and an S3-compatible server.
        "test": [_pinned("pytest"), _pinned("pytest-xdist"),
                 _pinned("moto[s3]"), _pinned("flask"), _pinned("flask-cors"),
                 _pinned("pyyaml")],
    },
    entry_points={"console_scripts": [
        "estimator-scale=estimator_scale.cli.__main__:run",
        "estimator-scale-launch=estimator_scale.launcher.__main__:run",
    ]},
)
