"""A wheel built from the tree installs as a library does, and what it
installs runs outside the checkout.

The wheel goes into a new venv. Downloading TensorFlow into it again would
take minutes, so the venv sees the project's venv's packages (the pinned
stack, constraints.txt) through a .pth file, never the checkout: pip then
has to resolve the wheel's requirements, every extra's included, against
exactly those pinned versions with no index to fall back on, and installs
nothing but the wheel. The library, the zoo and both console scripts then
come from the new venv, run from a folder outside the checkout.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

from tests.helpers.processes import PYTHON, ROOT

EXTRAS = "cpu,s3,horovod,plots,datasets,test"
"""Every extra but `gpu` (whose tensorflow[and-cuda] the CPU pins lack)."""


def _env(**extra):
  """The environment of a user's shell: no PYTHONPATH into the checkout and
  no pip configuration of this machine (its indexes, links, constraints)."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith("PIP_") and k != "PYTHONPATH"}
  env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
             TF_CPP_MIN_LOG_LEVEL="2", **extra)
  return env


def _run(argv, cwd, env=None, timeout=180):
  proc = subprocess.run(argv, cwd=cwd, env=env or _env(), capture_output=True,
                        text=True, timeout=timeout)
  assert proc.returncode == 0, (
      f"{argv} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
      f"{proc.stderr[-3000:]}")
  return proc


def _checkout_copy(to):
  """The files a fresh clone would have (committed or not, never ignored)."""
  listed = subprocess.run(
      ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
      cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
  for path in filter(None, listed):
    if os.path.isfile(os.path.join(ROOT, path)):
      os.makedirs(os.path.join(to, os.path.dirname(path)), exist_ok=True)
      shutil.copy2(os.path.join(ROOT, path), os.path.join(to, path))


def _wheel(tmp_path):
  source, dist = tmp_path / "source", tmp_path / "dist"
  _checkout_copy(source)
  _run([PYTHON, "-m", "pip", "wheel", "-q", "--no-deps",
        "--no-build-isolation", "-w", str(dist), str(source)], tmp_path)
  (wheel,) = dist.glob("estimator_scale-*.whl")
  return wheel


def _stack_view(path):
  """A folder of links to the project's venv's packages, less its editable
  install of the checkout (which pip would take for the package)."""
  site = sysconfig.get_paths()["purelib"]
  os.makedirs(path)
  for name in os.listdir(site):
    if not re.match(r"(estimator[-_]scale|easy-install\.pth|__editable__)",
                    name, re.IGNORECASE):
      os.symlink(os.path.join(site, name), os.path.join(path, name))
  return path


def _new_venv(path, packages):
  """A venv without pip (pip runs from the project's venv with --python)
  that sees `packages`, not the checkout."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)],
                 check=True, timeout=60)
  python = path / "bin" / "python"
  site = subprocess.run(
      [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
       "['purelib'])"], capture_output=True, text=True, check=True
  ).stdout.strip()
  with open(os.path.join(site, "project_stack.pth"), "w",
            encoding="utf-8") as f:
    f.write(f"{packages}\n")
  return python


def _pip(python, *args, cwd):
  return _run([PYTHON, "-m", "pip", "--python", str(python), *args], cwd)


def test_the_wheel_installs_against_the_pins_and_runs_outside_the_checkout(
    tmp_path):
  wheel = _wheel(tmp_path)
  names = zipfile.ZipFile(wheel).namelist()
  assert "estimator_scale/cli/__main__.py" in names
  assert "model_zoo/digits_data.py" in names
  assert not [n for n in names if n.split("/")[0] in ("tests", "tools")]

  venv = tmp_path / "venv"
  python = _new_venv(venv, _stack_view(tmp_path / "stack"))
  report = tmp_path / "report.json"
  _pip(python, "install", "--dry-run", "--no-index", "--find-links",
       str(wheel.parent), "-c", os.path.join(ROOT, "constraints.txt"),
       "--report", str(report), f"estimator_scale[{EXTRAS}]", cwd=tmp_path)
  with open(report, encoding="utf-8") as f:
    to_install = [i["metadata"]["name"] for i in json.load(f)["install"]]
  assert to_install == ["estimator_scale"], to_install
  _pip(python, "install", "-q", "--no-deps", "--no-index", str(wheel),
       cwd=tmp_path)
  _pip(python, "check", cwd=tmp_path)

  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  env = _env(ESTIMATOR_SCALE_DATA=str(tmp_path / "data"))
  where = _run([str(python), "-c",
                "import estimator_scale, model_zoo, tensorflow, sys; "
                "print(estimator_scale.__file__); print(model_zoo.__file__); "
                "print(tensorflow.__version__)"], elsewhere, env)
  library, zoo, version = where.stdout.split()
  assert library.startswith(str(venv)) and zoo.startswith(str(venv))
  assert version.startswith("2.15.")

  models = _run([str(venv / "bin" / "estimator-scale"), "models"], elsewhere,
                env)
  assert "digits_cnn" in models.stdout and "digits_mlp" in models.stdout
  summary = tmp_path / "run" / "summary.json"
  _run([str(venv / "bin" / "estimator-scale"), "--model=digits_mlp",
        f"--model_dir={tmp_path / 'run'}", "--global_batch_size=64",
        "--train_steps=20", f"--summary_json={summary}"], elsewhere, env)
  with open(summary, encoding="utf-8") as f:
    assert json.load(f)["global_step"] == 20
  _run([str(venv / "bin" / "estimator-scale-launch"), "--help"], elsewhere,
       env)
  # The s3 extra's file system registers (tensorflow-io aborts at a normal
  # exit once loaded, hence the library's own way out).
  _run([str(python), "-c", "from estimator_scale import filesystems; "
        "filesystems.require('model_dir', 's3://bucket/run'); "
        "filesystems.exit_process(0)"], elsewhere, env)
