"""Checks the Kubernetes manifests against the operators' schemas, offline.

No cluster runs here, so a manifest is checked against a schema written
from the operators' own definitions: field names, types and enums of the
MPIJob CRD (kubeflow/mpi-operator, `manifests/base/kubeflow.org_mpijobs.yaml`,
kubeflow.org/v2beta1) and of the TFJob CRD (kubeflow/training-operator
release-1.9, `manifests/base/crds/kubeflow.org_tfjobs.yaml`, kubeflow.org/v1),
with the rules their validation code adds where the CRD only says "string"
(replica types, restart and clean-pod policies, one launcher, a container
named "tensorflow"). Pod templates are checked against the part of core/v1's
PodSpec that manifests here use. As `kubectl apply --validate=strict` does,
an unknown field is an error, so a misspelt field cannot pass unnoticed.
Credentials must come from Secrets: an environment variable whose name says
it holds one must be a `valueFrom.secretKeyRef`, never an inline value.

  python -m tools.deploy.k8s_schema tools/deploy/manifests/*.yaml
"""
import dataclasses
import re
import sys
from typing import Callable, Optional

import yaml


@dataclasses.dataclass(frozen=True)
class Field:
  """One value's type: "object", "map", "list", "string", "integer",
  "boolean" or "quantity" (a string or a number, as resources take)."""
  kind: str
  fields: Optional[dict] = None         # object: name -> Field
  required: tuple = ()                  # object: names that must be there
  values: Optional["Field"] = None      # map values, list items
  keys: Optional[tuple] = None          # map: the keys allowed (None: any)
  enum: Optional[tuple] = None          # string: the values allowed
  minimum: Optional[int] = None         # integer
  check: Optional[Callable] = None      # (value, path) -> [errors]


def _obj(required=(), check=None, **fields):
  return Field("object", fields=fields, required=tuple(required), check=check)


def _map(values, keys=None):
  return Field("map", values=values, keys=keys)


def _list(items):
  return Field("list", values=items)


def _str(*enum):
  return Field("string", enum=enum or None)


def _int(minimum=None):
  return Field("integer", minimum=minimum)


_BOOL = Field("boolean")
_QUANTITY = Field("quantity")
_STRINGS = _list(_str())
_LABELS = _map(_str())

# Names whose value is a credential: these must come from a Secret.
_CREDENTIAL = re.compile(r"SECRET|PASSWORD|TOKEN|ACCESS_KEY|PRIVATE_KEY|"
                         r"CREDENTIAL", re.IGNORECASE)
# A DNS-1035 label (at most 63 characters): what a pod's host name and a
# Service name must be.
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _env_var(value, path):
  """An EnvVar has a value or a valueFrom; a credential only valueFrom's
  secretKeyRef."""
  name, where = value.get("name", ""), path.rstrip(".")
  if "value" in value and "valueFrom" in value:
    return [f"{where}: {name} has both value and valueFrom"]
  if _CREDENTIAL.search(name) and "secretKeyRef" not in value.get(
      "valueFrom", {}):
    return [f"{where}: {name} holds a credential, so it must come from a "
            "Secret (valueFrom.secretKeyRef), not be written in the manifest"]
  return []


_KEY_REF = _obj(required=("name", "key"), name=_str(), key=_str(),
                optional=_BOOL)
_ENV_VAR = _obj(
    required=("name",), check=_env_var, name=_str(), value=_str(),
    valueFrom=_obj(secretKeyRef=_KEY_REF, configMapKeyRef=_KEY_REF,
                   fieldRef=_obj(required=("fieldPath",), fieldPath=_str(),
                                 apiVersion=_str())))
_RESOURCES = _obj(limits=_map(_QUANTITY), requests=_map(_QUANTITY))
_CONTAINER = _obj(
    required=("name",),
    name=_str(), image=_str(),
    imagePullPolicy=_str("Always", "Never", "IfNotPresent"),
    command=_STRINGS, args=_STRINGS, workingDir=_str(),
    env=_list(_ENV_VAR),
    ports=_list(_obj(required=("containerPort",), name=_str(),
                     containerPort=_int(1), protocol=_str("TCP", "UDP",
                                                          "SCTP"))),
    resources=_RESOURCES,
    volumeMounts=_list(_obj(required=("name", "mountPath"), name=_str(),
                            mountPath=_str(), readOnly=_BOOL, subPath=_str())))


def _pod_spec(value, path):
  """Every volumeMount names a volume of the pod."""
  volumes = {v.get("name") for v in value.get("volumes", [])}
  return [f"{path}containers[{i}].volumeMounts: no volume {m.get('name')!r}"
          f" in the pod (volumes: {', '.join(sorted(map(str, volumes)))})"
          for i, c in enumerate(value.get("containers", []))
          for m in c.get("volumeMounts", []) if m.get("name") not in volumes]


_POD_TEMPLATE = _obj(
    metadata=_obj(labels=_LABELS, annotations=_LABELS),
    spec=_obj(
        required=("containers",), check=_pod_spec,
        containers=_list(_CONTAINER), initContainers=_list(_CONTAINER),
        volumes=_list(_obj(
            required=("name",), name=_str(),
            persistentVolumeClaim=_obj(required=("claimName",),
                                       claimName=_str(), readOnly=_BOOL),
            configMap=_obj(name=_str()), secret=_obj(secretName=_str()),
            emptyDir=_obj(medium=_str(), sizeLimit=_QUANTITY))),
        nodeSelector=_LABELS, serviceAccountName=_str(),
        priorityClassName=_str(), hostNetwork=_BOOL))


def _replica_spec(restart_policies, required=()):
  return _obj(required=required, replicas=_int(0),
              restartPolicy=_str(*restart_policies), template=_POD_TEMPLATE)


_RUN_POLICY = _obj(
    # The operators' validation: the CRDs say only "string".
    cleanPodPolicy=_str("None", "Running", "All"),
    ttlSecondsAfterFinished=_int(0), activeDeadlineSeconds=_int(0),
    backoffLimit=_int(0), suspend=_BOOL, managedBy=_str(),
    schedulingPolicy=_obj(minAvailable=_int(), queue=_str(),
                          minResources=_map(_QUANTITY),
                          priorityClass=_str(),
                          scheduleTimeoutSeconds=_int()))
_METADATA = _obj(required=("name",), name=_str(), namespace=_str(),
                 labels=_LABELS, annotations=_LABELS)


def _mpijob(value, path):
  """mpi-operator's rules: one launcher, workers >= 1, and a name that makes
  valid host names up to the last worker's."""
  errors = []
  specs = value.get("spec", {}).get("mpiReplicaSpecs", {})
  if "Launcher" not in specs:
    errors.append(f"{path}spec.mpiReplicaSpecs: needs a Launcher")
  elif specs["Launcher"].get("replicas") != 1:
    errors.append(f"{path}spec.mpiReplicaSpecs.Launcher.replicas: must be 1")
  workers = specs.get("Worker", {}).get("replicas", 1)
  if "Worker" in specs and workers < 1:
    errors.append(f"{path}spec.mpiReplicaSpecs.Worker.replicas: must be >= 1")
  name = value.get("metadata", {}).get("name", "")
  if not _DNS_LABEL.match(f"{name}-worker-{max(workers, 1) - 1}"):
    errors.append(f"{path}metadata.name: {name!r} does not make DNS-1035 "
                  "host names (<name>-worker-<i>: lower-case letters, digits "
                  "and '-', starting with a letter)")
  return errors


def _tfjob(value, path):
  """training-operator's rules: at most one Chief or Master, and each
  replica has a container named "tensorflow" (the one it sets up)."""
  errors = []
  specs = value.get("spec", {}).get("tfReplicaSpecs", {})
  if sum(1 for kind in specs if kind in ("Chief", "Master")) > 1:
    errors.append(f"{path}spec.tfReplicaSpecs: at most one Chief or Master")
  for kind, spec in specs.items():
    names = [c.get("name") for c in
             spec.get("template", {}).get("spec", {}).get("containers", [])]
    if "tensorflow" not in names:
      errors.append(f"{path}spec.tfReplicaSpecs.{kind}: needs a container "
                    f"named 'tensorflow' (has {names})")
  name = value.get("metadata", {}).get("name", "")
  if not _DNS_LABEL.match(name):
    errors.append(f"{path}metadata.name: {name!r} is not a DNS-1035 label")
  return errors


MPIJOB = _obj(
    required=("apiVersion", "kind", "metadata", "spec"), check=_mpijob,
    apiVersion=_str("kubeflow.org/v2beta1"), kind=_str("MPIJob"),
    metadata=_METADATA,
    spec=_obj(
        required=("mpiReplicaSpecs",),
        mpiReplicaSpecs=_map(_replica_spec(("Never", "OnFailure"),
                                           required=("replicas",)),
                             keys=("Launcher", "Worker")),
        slotsPerWorker=_int(0), runPolicy=_RUN_POLICY,
        mpiImplementation=_str("OpenMPI", "Intel", "MPICH"),
        launcherCreationPolicy=_str("AtStartup", "WaitForWorkersReady"),
        runLauncherAsWorker=_BOOL, sshAuthMountPath=_str()))

TFJOB = _obj(
    required=("apiVersion", "kind", "metadata", "spec"), check=_tfjob,
    apiVersion=_str("kubeflow.org/v1"), kind=_str("TFJob"),
    metadata=_METADATA,
    spec=_obj(
        required=("tfReplicaSpecs",),
        tfReplicaSpecs=_map(
            _replica_spec(("Always", "OnFailure", "Never", "ExitCode")),
            keys=("PS", "Worker", "Chief", "Master", "Evaluator")),
        runPolicy=_RUN_POLICY, successPolicy=_str("", "AllWorkers"),
        enableDynamicWorker=_BOOL))

PERSISTENT_VOLUME_CLAIM = _obj(
    required=("apiVersion", "kind", "metadata", "spec"),
    apiVersion=_str("v1"), kind=_str("PersistentVolumeClaim"),
    metadata=_METADATA,
    spec=_obj(
        required=("accessModes", "resources"),
        accessModes=_list(_str("ReadWriteOnce", "ReadOnlyMany",
                               "ReadWriteMany", "ReadWriteOncePod")),
        resources=_obj(required=("requests",), requests=_map(_QUANTITY)),
        storageClassName=_str(), volumeMode=_str("Filesystem", "Block")))

SCHEMAS = {
    ("kubeflow.org/v2beta1", "MPIJob"): MPIJOB,
    ("kubeflow.org/v1", "TFJob"): TFJOB,
    ("v1", "PersistentVolumeClaim"): PERSISTENT_VOLUME_CLAIM,
}

_PYTHON_TYPES = {"object": dict, "map": dict, "list": list, "string": str,
                 "integer": int, "boolean": bool, "quantity": (str, int, float)}


def _check(value, field, path):
  """[errors] of `value` against `field`; `path` names it ("spec.x.")."""
  where = path.rstrip(".") or "the document"
  expected = _PYTHON_TYPES[field.kind]
  if not isinstance(value, expected) or (
      field.kind in ("integer", "quantity") and isinstance(value, bool)):
    return [f"{where}: expected {field.kind}, got {type(value).__name__} "
            f"{value!r}"]
  errors = []
  if field.kind == "object":
    for name in value:
      if name not in field.fields:
        errors.append(f"{path}{name}: unknown field (valid: "
                      f"{', '.join(sorted(field.fields))})")
      else:
        errors += _check(value[name], field.fields[name], f"{path}{name}.")
    errors += [f"{path}{name}: required" for name in field.required
               if name not in value]
  elif field.kind == "map":
    for key, item in value.items():
      if field.keys is not None and key not in field.keys:
        errors.append(f"{path}{key}: not one of {', '.join(field.keys)}")
      else:
        errors += _check(item, field.values, f"{path}{key}.")
  elif field.kind == "list":
    for i, item in enumerate(value):
      errors += _check(item, field.values, f"{where}[{i}].")
  elif field.enum is not None and value not in field.enum:
    errors.append(f"{where}: {value!r} is not one of "
                  f"{', '.join(map(repr, field.enum))}")
  elif field.minimum is not None and value < field.minimum:
    errors.append(f"{where}: {value} is below the minimum {field.minimum}")
  if field.check and not errors:
    errors += field.check(value, path)
  return errors


def validate(document):
  """[errors] of one manifest document (a dict); [] when it is valid."""
  if not isinstance(document, dict):
    return [f"expected a mapping, got {type(document).__name__}"]
  schema = SCHEMAS.get((document.get("apiVersion"), document.get("kind")))
  if schema is None:
    known = ", ".join(f"{kind} ({version})" for version, kind in SCHEMAS)
    return [f"apiVersion {document.get('apiVersion')!r} kind "
            f"{document.get('kind')!r} is none of the kinds checked here: "
            f"{known}"]
  return _check(document, schema, "")


def load(path):
  """The documents of a YAML file (each a dict, with anchors resolved, as
  kubectl reads them)."""
  with open(path, encoding="utf-8") as f:
    return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def validate_file(path):
  """[errors] of every document of the YAML file at `path`, each prefixed
  with the file's name."""
  try:
    documents = load(path)
  except yaml.YAMLError as e:
    return [f"{path}: not valid YAML: {e}"]
  return [f"{path}: {error}" for document in documents
          for error in validate(document)]


def main(paths):
  """Prints each error of the files at `paths`; exit status 1 if any."""
  if not paths:
    print("usage: python -m tools.deploy.k8s_schema MANIFEST.yaml ...",
          file=sys.stderr)
    return 2
  errors = [error for path in paths for error in validate_file(path)]
  for error in errors:
    print(error)
  if not errors:
    print(f"{len(paths)} manifest file(s) valid")
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
