"""What the framework records about a graph while a model_fn builds it.

One `GraphState` per graph (tf.distribute's replica threads share it),
keyed by the graph each user means (the accumulation loop's function graph,
or the one variables live in). Records are made in this order, each read
after those before it: 1. `declared`, the Estimator building the graph,
before the model_fn runs; 2. the dynamic tables (`tables`, `named_tables`)
and the step their lookups stamp (`update_number`), as the network makes
them; 3. sharded `lookups`, `row_counts` and `linear_variables`, as the
network runs, read by the update; 4. a Keras optimizer's `recorded_slots`
and deltas' `static_tables`, as the update makes them, read by savers.
"""
import dataclasses
from typing import Any
import weakref

_STATES = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class GraphState:
  """The records of one graph (the module docstring gives their order)."""
  declared: Any = None
  tables: dict = dataclasses.field(default_factory=dict)
  named_tables: dict = dataclasses.field(default_factory=dict)
  update_number: Any = None
  lookups: list = dataclasses.field(default_factory=list)
  row_counts: dict = dataclasses.field(default_factory=dict)
  linear_variables: set = dataclasses.field(default_factory=set)
  recorded_slots: dict = dataclasses.field(default_factory=dict)
  static_tables: dict = dataclasses.field(default_factory=dict)


def of(graph):
  """The `GraphState` of `graph`, made empty on first use."""
  return _STATES.setdefault(graph, GraphState())
