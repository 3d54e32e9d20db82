"""Every enum flag of the command line offers exactly its module's list.

A list written twice drifts: a choice added to a module but not to the CLI
cannot be picked, and one the module dropped fails only after TensorFlow
has started.
"""
from absl import flags
import pytest

from estimator_scale import choices
from estimator_scale.backends import names as backend_names
from estimator_scale.cli import flags as cli_flags
from estimator_scale.embeddings import compact
from estimator_scale.train_ops import optimizers
from estimator_scale import precision
from estimator_scale.train_ops import scaling
from estimator_scale.train_ops import schedules

CONSTANTS = {
    "adascale_parts": choices.ADASCALE_PARTS,
    "allreduce_compression": choices.COMPRESSIONS,
    "distribution": choices.DISTRIBUTIONS,
    "elastic_batch": choices.ELASTIC_BATCH_POLICIES,
    "export_dtype": compact.DTYPES,
    "linear_optimizer": tuple(optimizers.OPTIMIZERS),
    "lr_scaling": scaling.RULES,
    "lr_schedule": schedules.SCHEDULES,
    "optimizer": tuple(optimizers.OPTIMIZERS),
    "precision": precision.PRECISIONS,
    "sparse_exchange": choices.SPARSE_EXCHANGES,
}
"""Each enum flag and the module constant its choices must equal."""

UNSET_BY_DEFAULT = ("linear_optimizer",)
"""Enum flags whose default is None: another flag's value stands in."""


def _enum_flags():
  """{name: flag} of the enum flags of the command line."""
  return {flag.name: flag
          for flag in cli_flags.FLAGS.get_flags_for_module(cli_flags.__name__)
          if isinstance(flag.parser, flags.EnumParser)}


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_enum_choices_are_the_module_constant(name):
  flag = _enum_flags()[name]
  assert list(flag.parser.enum_values) == list(CONSTANTS[name])
  if name in UNSET_BY_DEFAULT:
    assert flag.default is None
  else:
    assert flag.default in CONSTANTS[name]


def test_every_enum_flag_has_its_constant_here():
  assert sorted(_enum_flags()) == sorted(CONSTANTS)


def test_every_distribution_has_a_backend_and_no_other():
  assert list(backend_names._MODULES) == list(choices.DISTRIBUTIONS)  # pylint: disable=protected-access
