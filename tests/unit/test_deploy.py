"""The container recipe and the Kubernetes manifests, checked without a cluster.

No image can be built and no operator runs here, so: the Dockerfile's build
step must be the setup script that `make setup` runs, over a build context
holding what that script reads; every manifest must pass the schema written
from the operators' CRDs (tools/deploy/k8s_schema.py), which must refuse
wrong fields, enums and inline credentials; every container command must
parse (the CLI's flags through absl, horovodrun's through Horovod's own
parser) and agree with what the operator gives the pod (the hostfile, the
discovery script, the replicas); and the TF_CONFIG a TFJob writes into each
pod must be one the framework reads as the cluster the manifest describes.
"""
import copy
import fnmatch
import glob
import json
import os
import re
import sys
from unittest import mock

from horovod.runner import launch as horovod_launch
from horovod.runner.common.util import hosts
from horovod.runner.elastic import discovery
import pytest
import tensorflow as tf

from estimator_scale.backends import names as backend_names
from estimator_scale.backends import tf_config
from tests.helpers import commands
from tests.helpers import docs
from tools.deploy import k8s_schema

DEPLOY = os.path.join(docs.ROOT, "tools", "deploy")
DOCKERFILE = os.path.join(DEPLOY, "Dockerfile")
SETUP_SCRIPT = "tools/rig/setup_env.sh"
MANIFESTS = sorted(glob.glob(os.path.join(DEPLOY, "manifests", "*.yaml")))
# Where mpi-operator mounts its ConfigMap in the launcher.
HOSTFILE = "/etc/mpi/hostfile"
DISCOVER_HOSTS = "/etc/mpi/discover_hosts.sh"


def _read(path):
  with open(os.path.join(docs.ROOT, path), encoding="utf-8") as f:
    return f.read()


def _instructions():
  """[(INSTRUCTION, arguments)] of the Dockerfile, continued lines joined."""
  text = re.sub(r"\\\n", " ", _read(DOCKERFILE))
  return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
          for line in text.splitlines()
          if line.strip() and not line.lstrip().startswith("#")]


def _setup_variable(name):
  """A variable's value as tools/rig/setup_env.sh assigns it (the default
  of `${NAME:-default}`)."""
  match = re.search(rf"^{name}=(.*)$", _read(SETUP_SCRIPT), re.MULTILINE)
  assert match, f"{SETUP_SCRIPT} assigns no {name}"
  value = match.group(1).strip('"')
  default = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
  return default.group(1) if default else value


def _documents():
  """[(file name, manifest)] of every manifest document."""
  return [(os.path.basename(path), document) for path in MANIFESTS
          for document in k8s_schema.load(path)]


def _jobs(kind):
  return [(name, doc) for name, doc in _documents() if doc["kind"] == kind]


def _containers(replica_spec):
  return replica_spec["template"]["spec"]["containers"]


def _flag(words, name):
  """The value of `--name=value` in `words`, or None."""
  values = [w.partition("=")[2] for w in words if w.startswith(f"--{name}=")]
  return values[-1] if values else None


def _cli_part(words):
  """The words from `python -m estimator_scale.cli` on."""
  for i, word in enumerate(words[:-2]):
    if word == "python" and words[i + 1:i + 3] == ["-m", "estimator_scale.cli"]:
      return words[i:]
  raise AssertionError(f"no `python -m estimator_scale.cli` in {words}")


def _mounted(model_dir, replica_spec):
  """Whether `model_dir` lies on a claim that the replica's pods mount."""
  pod = replica_spec["template"]["spec"]
  claims = {v["name"] for v in pod.get("volumes", [])
            if "persistentVolumeClaim" in v}
  return any(model_dir.startswith(m["mountPath"].rstrip("/") + "/")
             for c in pod["containers"] for m in c.get("volumeMounts", [])
             if m["name"] in claims)


def test_dockerfile_builds_the_stack_with_the_setup_script():
  steps = _instructions()
  runs = [args for instruction, args in steps if instruction == "RUN"]
  setup = _read("Makefile").partition("\nsetup-env:\n")[2].splitlines()[0]
  setup = setup.strip()
  assert setup == f"bash {SETUP_SCRIPT}", "make setup-env no longer starts so"
  assert setup in runs, f"the Dockerfile does not RUN `{setup}`"
  others = [run for run in runs if run != setup]
  assert not [run for run in others if re.search(r"\bpip\b|setup\.py", run)], (
      "Python packages are installed outside the setup script")
  image = next(args for instruction, args in steps if instruction == "FROM")
  python = _setup_variable("PYTHON")
  assert image.startswith(f"python:{python[len('python'):]}-"), (
      f"the image's Python ({image}) is not the setup's ({python})")
  # The Horovod build's toolchain, git for the patch, ssh for MPIJob.
  apt = " ".join(run for run in others if "apt-get install" in run).split()
  for package in ("g++", "cmake", "make", "git", "openssh-server",
                  "openssh-client"):
    assert package in apt, f"the Dockerfile installs no {package}"
  copied = next(i for i, (instruction, _) in enumerate(steps)
                if instruction == "COPY")
  assert copied < steps.index(("RUN", setup)), (
      "the setup runs before the checkout is copied in")
  workdir = next(args for instruction, args in steps
                 if instruction == "WORKDIR")
  venv_bin = f"{workdir}/{_setup_variable('VENV')}/bin"
  env = " ".join(args for instruction, args in steps if instruction == "ENV")
  assert f"PATH={venv_bin}:" in env, f"PATH does not start with {venv_bin}"


def test_build_context_holds_what_the_setup_reads_and_not_the_venv():
  with open(DOCKERFILE + ".dockerignore", encoding="utf-8") as f:
    ignored = [line.strip() for line in f
               if line.strip() and not line.startswith("#")]

  def excluded(path):
    return any(fnmatch.fnmatch(path, p) or
               fnmatch.fnmatch(path, p.removeprefix("**/")) or
               path.startswith(p.rstrip("/") + "/") for p in ignored)

  assert ("COPY", ". .") in _instructions()
  read = [SETUP_SCRIPT, "pyproject.toml", "setup.py",
          "estimator_scale/__init__.py",
          _setup_variable("CONSTRAINTS"), _setup_variable("HOROVOD_PATCHES")]
  for path in read:
    assert os.path.exists(os.path.join(docs.ROOT, path)), path
    assert not excluded(path), f"{path} is left out of the image"
  # A copied .venv would carry the setup's stamp: the image would skip it.
  venv = _setup_variable("VENV")
  assert excluded(f"{venv}/.stack-stamp") and excluded(f"{venv}/bin/python")


def test_every_manifest_matches_the_operators_schemas():
  assert {doc["kind"] for _, doc in _documents()} == {
      "MPIJob", "TFJob", "PersistentVolumeClaim"}
  for path in MANIFESTS:
    assert k8s_schema.validate_file(path) == []
  assert k8s_schema.main(MANIFESTS) == 0


def _set(document, path, value):
  """Sets (or with _DELETE removes) the value at "a/b/0/c" in `document`."""
  *parents, last = path.split("/")
  node = document
  for key in parents:
    node = node[int(key)] if isinstance(node, list) else node[key]
  if isinstance(node, list):
    last = int(last)
  if value is _DELETE:
    del node[last]
  else:
    node[last] = value


_DELETE = object()
_MPI_WORKER = "spec/mpiReplicaSpecs/Worker"
_TF_CHIEF = "spec/tfReplicaSpecs/Chief"
_TF_CONTAINER = _TF_CHIEF + "/template/spec/containers/0"


@pytest.mark.parametrize("manifest, path, value, error", [
    ("horovod-mpijob.yaml", _MPI_WORKER + "/replica", 2,
     "Worker.replica: unknown field"),
    ("horovod-mpijob.yaml", _MPI_WORKER + "/restartPolicy", "Always",
     "'Always' is not one of 'Never', 'OnFailure'"),
    ("horovod-mpijob.yaml", "spec/runPolicy/cleanPodPolicy", "Finished",
     "cleanPodPolicy: 'Finished' is not one of"),
    ("horovod-mpijob.yaml", "spec/mpiImplementation", "OpenMpi",
     "mpiImplementation: 'OpenMpi' is not one of"),
    ("horovod-mpijob.yaml", _MPI_WORKER + "/replicas", "2",
     "Worker.replicas: expected integer, got str"),
    ("horovod-mpijob.yaml", "spec/mpiReplicaSpecs/Launcher/replicas", 2,
     "Launcher.replicas: must be 1"),
    ("horovod-mpijob.yaml", "spec/mpiReplicaSpecs/Workers",
     {"replicas": 1}, "Workers: not one of Launcher, Worker"),
    ("horovod-mpijob.yaml", "apiVersion", "kubeflow.org/v1",
     "none of the kinds checked here"),
    ("horovod-mpijob.yaml", _MPI_WORKER + "/template/spec/volumes", _DELETE,
     "no volume 'shared' in the pod"),
    ("multi-worker-tfjob.yaml", "spec/tfReplicaSpecs/Workers",
     {"replicas": 1}, "Workers: not one of PS, Worker, Chief"),
    ("multi-worker-tfjob.yaml", _TF_CONTAINER + "/name", "trainer",
     "needs a container named 'tensorflow'"),
    ("multi-worker-tfjob.yaml", _TF_CONTAINER + "/imagePullPolicy", "Sometimes",
     "imagePullPolicy: 'Sometimes' is not one of"),
    ("multi-worker-tfjob.yaml", "spec/successPolicy", "AnyWorker",
     "successPolicy: 'AnyWorker' is not one of"),
    ("multi-worker-tfjob.yaml", "spec/tfReplicaSpecs/Master",
     {"replicas": 1, "template": {"spec": {"containers": [
         {"name": "tensorflow", "image": "x"}]}}},
     "at most one Chief or Master"),
    ("parameter-server-tfjob.yaml", _TF_CONTAINER + "/env/3",
     {"name": "AWS_SECRET_ACCESS_KEY", "value": "inline"},
     "AWS_SECRET_ACCESS_KEY holds a credential, so it must come from a Secret"),
    ("shared-volume.yaml", "spec/accessModes", ["ReadWriteAll"],
     "'ReadWriteAll' is not one of"),
])
def test_the_schema_refuses_a_wrong_field_type_or_enum(manifest, path, value,
                                                       error):
  document = copy.deepcopy(k8s_schema.load(
      os.path.join(DEPLOY, "manifests", manifest))[0])
  assert k8s_schema.validate(document) == []
  _set(document, path, value)
  errors = k8s_schema.validate(document)
  assert any(error in e for e in errors), errors


def test_credentials_come_from_secrets():
  s3_jobs = 0
  for name, document in _documents():
    assert document["kind"] != "Secret", f"{name} holds a Secret's values"
    specs = (document["spec"].get("tfReplicaSpecs") or
             document["spec"].get("mpiReplicaSpecs") or {})
    for replica in specs.values():
      for container in _containers(replica):
        env = {e["name"]: e for e in container.get("env", [])}
        if (_flag(container.get("command", []), "model_dir") or
            "").startswith("s3://"):
          s3_jobs += 1
          for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert key in env, f"{name}: model_dir in S3 without {key}"
            assert "secretKeyRef" in env[key]["valueFrom"], (name, key)
            assert "value" not in env[key]
  assert s3_jobs, "no manifest shows model_dir in S3 with a Secret"


def _operator_hosts(job, namespace="default"):
  """The workers' host names in the files mpi-operator writes for the
  launcher (newConfigMap, updateDiscoverHostsInConfigMap), all running."""
  name = job["metadata"]["name"]
  workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
  return [f"{name}-worker-{i}.{name}.{namespace}.svc" for i in range(workers)]


def test_horovod_launchers_run_horovodrun_over_the_operators_hosts(tmp_path):
  jobs = _jobs("MPIJob")
  assert len(jobs) == 2
  elastic_jobs = 0
  for name, job in jobs:
    specs = job["spec"]["mpiReplicaSpecs"]
    words = _containers(specs["Launcher"])[0]["command"]
    assert words[0] == "horovodrun", name
    with mock.patch.object(sys, "argv", words):
      args = horovod_launch.parse_args()
    assert args.use_gloo, f"{name}: horovodrun without --gloo"
    slots = job["spec"]["slotsPerWorker"]
    assert args.num_proc == len(_operator_hosts(job)) * slots, name
    want = {host: slots for host in _operator_hosts(job)}
    if args.host_discovery_script:
      elastic_jobs += 1
      assert args.host_discovery_script == DISCOVER_HOSTS, name
      # The operator's script echoes host names without slots, which
      # horovodrun reads with --slots-per-host.
      script = tmp_path / "discover_hosts.sh"
      script.write_text("#!/bin/sh\n" + "".join(
          f"echo {host}\n" for host in want))
      script.chmod(0o555)
      assert discovery.HostDiscoveryScript(
          str(script), args.slots).find_available_hosts_and_slots() == want
      assert args.min_num_proc <= args.num_proc <= args.max_num_proc, name
    else:
      assert args.hostfile == HOSTFILE, name
      # horovodrun reads the OpenMPI form ("host slots=N"), the default.
      assert job["spec"].get("mpiImplementation", "OpenMPI") == "OpenMPI"
      hostfile = tmp_path / "hostfile"
      hostfile.write_text("".join(f"{host} slots={n}\n"
                                  for host, n in want.items()))
      read = hosts.parse_hosts(hosts.parse_host_files(str(hostfile)))
      assert {h.hostname: h.slots for h in read} == want
    cli = _cli_part(args.command)
    commands.check_command(cli, name)
    assert _flag(cli, "distribution") == "horovod", name
    worker = specs["Worker"]
    assert _containers(worker)[0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert _mounted(_flag(cli, "model_dir"), worker), (
        f"{name}: model_dir is not on the workers' shared claim")
  assert elastic_jobs == 1


def _tfjob_tf_config(job, replica_type, index, namespace="default"):
  """The TF_CONFIG training-operator (release-1.9, genTFConfigJSONStr)
  writes into a replica's pod: every replica type lower-cased, each task at
  <job>-<type>-<index>.<namespace>.svc and the tensorflow container's
  "tfjob-port" (2222 without one)."""
  cluster = {}
  for kind, spec in job["spec"]["tfReplicaSpecs"].items():
    ports = [p["containerPort"] for c in _containers(spec)
             if c["name"] == "tensorflow" for p in c.get("ports", [])
             if p.get("name") == "tfjob-port"]
    cluster[kind.lower()] = [
        f"{job['metadata']['name']}-{kind.lower()}-{i}.{namespace}.svc:"
        f"{ports[0] if ports else 2222}"
        for i in range(spec.get("replicas", 1))]
  return json.dumps({"cluster": cluster,
                     "task": {"type": replica_type.lower(), "index": index},
                     "environment": "cloud"})


def test_tfjob_pods_get_a_tf_config_the_framework_reads():
  jobs = _jobs("TFJob")
  assert sorted(_flag(_cli_part(_containers(spec)[0]["command"]),
                      "distribution")
                for _, job in jobs
                for spec in job["spec"]["tfReplicaSpecs"].values()) == [
                    "multi_worker_mirrored"] * 2 + ["parameter_server"] * 3
  for name, job in jobs:
    specs = job["spec"]["tfReplicaSpecs"]
    trainers = []
    for kind, spec in specs.items():
      cli = _cli_part(_containers(spec)[0]["command"])
      commands.check_command(cli, f"{name} {kind}")
      model_dir = _flag(cli, "model_dir")
      assert model_dir.startswith("s3://") or _mounted(model_dir, spec), (
          f"{name} {kind}: model_dir is neither in S3 nor on a shared claim")
      backend = backend_names.get(_flag(cli, "distribution"))
      for index in range(spec["replicas"]):
        environ = {"TF_CONFIG": _tfjob_tf_config(job, kind, index)}
        topology = tf_config.read_topology(backend, environ)
        # TensorFlow's own reading of the same TF_CONFIG agrees.
        with mock.patch.dict(os.environ, environ):
          run_config = tf.estimator.RunConfig()
        assert run_config.task_type == kind.lower()
        assert run_config.is_chief == topology.is_chief
        if kind != "PS":
          trainers.append((topology.worker_index, topology.is_chief))
        labels = tf_config.cluster_worker_labels(environ)
    count = sum(specs[k]["replicas"] for k in ("Chief", "Worker") if k in specs)
    assert sorted(trainers) == [(0, True)] + [(i, False)
                                              for i in range(1, count)], name
    assert run_config.num_worker_replicas == count, name
    assert labels[0] == f"chief 0 ({job['metadata']['name']}-chief-0." \
                        "default.svc)", labels


def test_the_guide_applies_every_manifest():
  applied = {words[3] for block, words in _guide_commands()
             if words[:3] == ["kubectl", "apply", "-f"]}
  assert applied == {os.path.relpath(p, docs.ROOT) for p in MANIFESTS}


def _guide_commands():
  """[(line, words)] of the commands in docs/kubernetes.md's ```sh blocks."""
  page = os.path.join(docs.DOCS, "kubernetes.md")
  return [(line, words) for language, text, line in docs.fenced_blocks(page)
          if language == "sh" for words in docs.shell_commands(text)]
