"""What the framework records about a graph while a model_fn builds it.

One `GraphState` per graph, made on first use and dropped with the graph
(tf.distribute's replica threads share it). Within one training graph the
records are made in this order, and each reader needs the ones before it:

1. `declared`: the Estimator building the graph (`pipeline.declare_estimator`,
   before the model_fn runs), which `build_train_op` falls back on;
2. `tables`, `named_tables`, `update_number`: the dynamic tables as the
   network makes them, and the step their lookups stamp rows with;
3. `lookups`, `linear_variables`: the sharded tables' lookups and the
   variables built in `linear_part()`, recorded as the network runs, which
   the update reads (the exchange of a shard's rows, the linear part's
   optimizer);
4. `recorded_slots`: a Keras optimizer's slots of a dynamic table, recorded
   as the update makes them, which the checkpoint hooks read after the
   graph is built.

Each user keys the state by the graph it means: the accumulation loop's
function graph or the graph its variables live in.
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
  linear_variables: set = dataclasses.field(default_factory=set)
  recorded_slots: dict = dataclasses.field(default_factory=dict)


def of(graph):
  """The `GraphState` of `graph`, made empty on first use."""
  return _STATES.setdefault(graph, GraphState())
