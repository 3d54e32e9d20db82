"""Elastic Horovod: training goes on while hosts join, leave or fail; ranks
carry rank 0's checkpoint across a change, not memory."""
import contextvars
import dataclasses
import functools
import os
import sys
import time
import urllib.request

from absl import logging
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from estimator_scale import choices
from estimator_scale import errors
from estimator_scale.backends import coordinator as coordinator_lib
from estimator_scale.backends import names as backend_names
from estimator_scale.backends.horovod import faults
from estimator_scale.backends.horovod import ranks
from estimator_scale.embeddings import shard_checkpoints

BATCH_POLICIES = choices.ELASTIC_BATCH_POLICIES
COMMIT_EVERY_N_STEPS = choices.COMMIT_EVERY_N_STEPS

FULL_DISK_ATTEMPTS = 5
"""Saves in a row that may find the disk full, each sending the ranks back
to the last commit, before the rank gives up with the save's error."""
FULL_DISK_WAIT_SECONDS = 5
FULL_DISK_MAX_WAIT_SECONDS = 60
"""The wait before going back after a failed save, doubling with each one
in a row, for the disk to get room."""

_ATTEMPT = contextvars.ContextVar("estimator_scale_elastic_attempt",
                                  default=None)
"""The elastic job whose `train` runs in this context. `train` makes its
Estimator with distribution="horovod", a name, so the job cannot be an
argument there: the Horovod backend made inside takes it from here."""


def attempting():
  """The elastic job whose attempt makes this Horovod backend, or None."""
  return _ATTEMPT.get()


@dataclasses.dataclass(frozen=True)
class Batch:
  """The batch of the job at its current size: what `train` builds with."""
  global_batch_size: int
  accumulation_steps: int


def batch_for_size(policy, micro_batch, start, size):
  """The Batch of `size` ranks under `policy`, one rank's `micro_batch` fixed.

  Raises:
    errors.ConfigError: `hold` on a size that cannot share the update evenly.
  """
  if policy == "scale":
    return Batch(micro_batch * start.accumulation_steps * size,
                 start.accumulation_steps)
  micro_batches = start.global_batch_size // micro_batch
  if micro_batches % size:
    fits = [n for n in range(1, micro_batches + 1) if micro_batches % n == 0]
    raise errors.ConfigError(
        f"elastic_batch='hold' cannot keep global_batch_size="
        f"{start.global_batch_size} on {size} ranks: an update is "
        f"{micro_batches} micro-batches of {micro_batch} examples, which "
        f"{size} ranks cannot share evenly (sizes that can: "
        f"{', '.join(map(str, fits))}); use elastic_batch='scale' to let the "
        "global batch follow the size")
  return Batch(start.global_batch_size, micro_batches // size)


def check_arguments(elastic_batch, commit_every_n_steps):
  if elastic_batch not in BATCH_POLICIES:
    raise errors.ConfigError(
        f"elastic_batch={elastic_batch!r} is not a policy; valid: "
        f"{', '.join(BATCH_POLICIES)}")
  if not isinstance(commit_every_n_steps, int) or commit_every_n_steps < 1:
    raise errors.ConfigError(
        f"commit_every_n_steps={commit_every_n_steps!r} must be an integer "
        ">= 1 (updates between commits)")


class CommitHook(tf.compat.v1.train.SessionRunHook):
  """Commits every `every` updates (as rank 0's saver counts); leaves if the
  hosts changed."""

  def __init__(self, job, every):
    self._job = job
    self._every = every

  def begin(self):
    self._global_step = tf.compat.v1.train.get_global_step()

  def after_create_session(self, session, coord):
    del coord
    self._next = session.run(self._global_step) + self._every
    self._runs_to_next = self._every
    self._due = None

  def before_run(self, run_context):
    if self._due is not None:
      step, self._due = self._due, None
      self._job.commit(step)

  def after_run(self, run_context, run_values):
    self._runs_to_next -= 1
    if self._runs_to_next > 0:
      return
    step = run_context.session.run(self._global_step)
    if step >= self._next:
      self._due = step
      self._next = step + self._every
    self._runs_to_next = max(1, self._next - step)


class _Job:
  """One elastic run: its batch policy and what it logs at each change."""

  def __init__(self, hvd, state, start, elastic_batch, commit_every_n_steps):
    self._hvd = hvd
    self.state = state
    self.start = start
    self.elastic_batch = elastic_batch
    self.commit_every_n_steps = commit_every_n_steps
    self._why = None  # why the last attempt ended
    self._full_disk_failures = 0  # failed saves since the last commit
    self._batch = None
    self._announced = False

  @property
  def rank(self):
    """This process's rank in the current set of ranks."""
    return self._hvd.rank()

  def _broadcast(self, value):
    """Rank 0's value, eager even inside a finalized graph-mode session."""
    with context.eager_mode():
      return self._hvd.broadcast_object(value, root_rank=0,
                                        name="estimator_scale_elastic")

  def attempt(self, state, train):
    """One try of `train` on the ranks there are now."""
    size = self._hvd.size()
    if state.micro_batch is None:  # the job's first attempt: as given
      # (a global batch that does not split is refused where it is used,
      # naming the nearest valid sizes)
      self._batch = self.start
      state.micro_batch = max(1, self.start.global_batch_size // (
          size * self.start.accumulation_steps))
      state.save()
    else:
      self._batch = batch_for_size(self.elastic_batch, state.micro_batch,
                                   self.start, size)
    self._announced = False
    token = _ATTEMPT.set(self)
    try:
      return train(self._batch)
    except Exception as e:  # pylint: disable=broad-except
      # Lazy: Horovod is optional; `run` imported it for this rank.
      from horovod.common import exceptions  # pylint: disable=g-import-not-at-top
      if isinstance(e, exceptions.HostsUpdatedInterrupt):
        self._why = "the hosts changed"
        raise
      internal = isinstance(e, exceptions.HorovodInternalError)
      if faults.disk_full(e) and not internal:
        self._back_to_commit_after_full_disk(e)
      if not (internal or faults.collective_failed(e)):
        raise
      self._why = "a rank failed or left"
      if internal:
        raise
      raise exceptions.HorovodInternalError(e) from e
    finally:
      _ATTEMPT.reset(token)

  def _back_to_commit_after_full_disk(self, error):
    """Sends this rank back to the last commit after a wait; re-raises `error`
    after FULL_DISK_ATTEMPTS failed saves."""
    from horovod.common import exceptions  # pylint: disable=g-import-not-at-top
    self._full_disk_failures += 1
    if self._full_disk_failures > FULL_DISK_ATTEMPTS:
      raise error
    wait = min(FULL_DISK_WAIT_SECONDS * 2 ** (self._full_disk_failures - 1),
               FULL_DISK_MAX_WAIT_SECONDS)
    logging.warning(
        "elastic Horovod: rank %d's save found the disk full (%s); every "
        "rank goes back to the last commit, in %d s (failed save %d of %d "
        "in a row)", self.rank, faults.disk_full(error), wait,
        self._full_disk_failures, FULL_DISK_ATTEMPTS)
    time.sleep(wait)
    self._why = "a save found the disk full"
    raise exceptions.HorovodInternalError(error) from error

  def attach(self, model_dir, topology):
    """The commit hooks of an Estimator made in this attempt; logs its start.

    Raises:
      errors.ConfigError: rank 0's model_dir lacks the last commit.
    """
    if not self._announced:
      self._announced = True
      found = None
      if topology.is_chief:
        shard_checkpoints.resume_where_tables_were_merged(model_dir)
        found = coordinator_lib.checkpoint_step(model_dir)
      found, committed, host = self._broadcast(
          (found, self.state.step, os.environ.get("HOROVOD_HOSTNAME", "")))
      if found < committed:
        raise errors.ConfigError(
            f"elastic Horovod resumes from rank 0's model_dir, but rank 0 "
            f"(host {host}) finds step {found} in model_dir={model_dir} "
            f"while the job committed step {committed}: every host must see "
            "the same model_dir (a shared file system or object storage)")
      self._announce(topology.num_workers, found)
    return [CommitHook(self, self.commit_every_n_steps)]

  def _announce(self, size, step):
    old = self.state.size
    self.state.size = size
    self.state.save()
    if not self._hvd.rank() == 0:
      return
    batch = self._batch
    recipe = (f"global batch {batch.global_batch_size}, "
              f"{batch.accumulation_steps} accumulation steps per rank")
    if not old:
      logging.info(
          "elastic Horovod: %d ranks, starting at step %d, %s, a commit "
          "every %d updates", size, step, recipe, self.commit_every_n_steps)
    else:
      logging.info(
          "elastic Horovod: %d -> %d ranks (%s), resuming at step %d, %s",
          old, size, self._why, step, recipe)

  def commit(self, step):
    """Records rank 0's commit at `step`; leaves if the hosts changed."""
    self.state.step = self._broadcast(step)
    self._full_disk_failures = 0
    self.state.commit()


_SLOT_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
                   "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
                   "HOROVOD_CROSS_SIZE")
"""This process's place among the ranks, in the order horovodrun's elastic
driver answers them."""


def next_slot(environ):
  """This process's slot in the next set of ranks (rank -1: its host left);
  ask once per change, as the driver counts the question."""
  # Lazy: Horovod is optional; `run` imported it for this rank.
  from horovod.runner.elastic import rendezvous  # pylint: disable=g-import-not-at-top
  url = (f"http://{environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:"
         f"{environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}/"
         f"{rendezvous.GET_RANK_AND_SIZE}/"
         f"{environ.get('HOROVOD_HOSTNAME', 'localhost')}:"
         f"{environ['HOROVOD_LOCAL_RANK']}")
  with urllib.request.urlopen(url) as answer:
    return [int(value) for value in answer.read().decode().split(",")]


def _rejoin(hvd, environ=None):
  """Joins the new set of ranks, or exits 0 where this host has left the job."""
  environ = os.environ if environ is None else environ
  hvd.shutdown()
  slot = next_slot(environ)
  if slot[0] == -1:
    print(f"elastic Horovod: host {environ.get('HOROVOD_HOSTNAME', '?')} "
          "left the job (the host discovery script no longer lists it); "
          "this rank ends, the others go on", flush=True)
    sys.exit(0)
  environ.update(zip(_SLOT_VARIABLES, map(str, slot)))
  elastic = environ.pop("HOROVOD_ELASTIC")
  try:
    hvd.init()
  finally:
    environ["HOROVOD_ELASTIC"] = elastic


def _join(environ=None):
  """horovod.tensorflow initialised for this rank; a rank too late for its
  round asks for its slot again, once."""
  try:
    return ranks.init_horovod()
  except ValueError as e:  # what an unpatched Horovod raises
    # Lazy: Horovod is optional; init_horovod imported it.
    from horovod.common import exceptions  # pylint: disable=g-import-not-at-top
    if not isinstance(e, getattr(exceptions, "HorovodInitError", ())):
      raise
  hvd = ranks.import_horovod()
  _rejoin(hvd, environ)
  return hvd


def run(train, global_batch_size, accumulation_steps=1, elastic_batch="scale",
        commit_every_n_steps=COMMIT_EVERY_N_STEPS, intra_op_threads=None):
  """Runs `train(batch)` on every rank until it returns, through host changes.

  `train` makes and trains the Estimator (distribution="horovod"); it is
  called again on the new ranks after each change. Returns its result.

  Raises:
    errors.ConfigError: a bad argument, a size `hold` cannot honour, or a
      model_dir rank 0's host does not share.
    SystemExit: (status 0) on a rank whose host was dropped.
  """
  check_arguments(elastic_batch, commit_every_n_steps)
  if not ranks.elastic_requested():
    raise errors.TopologyError(
        "an elastic run needs horovodrun's elastic driver: horovodrun "
        "--min-np N --max-np M --host-discovery-script SCRIPT python ...")
  hvd = _join()
  # Lazy: Horovod is optional; init_horovod says how to install it.
  from horovod.common import elastic as horovod_elastic  # pylint: disable=g-import-not-at-top
  ranks.bind_rank(hvd, backend_names.get("horovod"), intra_op_threads)
  state = horovod_elastic.ObjectState(
      bcast_object=lambda value: _Job._broadcast(job, value),
      get_rank=hvd.rank, step=0, size=0, micro_batch=None)
  job = _Job(hvd, state, Batch(global_batch_size, accumulation_steps),
             elastic_batch, commit_every_n_steps)
  return horovod_elastic.run_fn(job.attempt, functools.partial(
      _rejoin, hvd))(state, train)
