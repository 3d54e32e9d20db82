"""What an update should put on a trainer's link, from the model's shapes.

The bench prints these beside what it counts on the rig's links, so each
measured figure can be checked by hand. This module is the one place the
bench model's shapes live (worker.py builds the model from them), and it
imports no TensorFlow: the bench's driver reads it.

Per trainer and update, with U ids looked up (all distinct, worker.py
draws them so), the table's part is what
tools/bench/network/embedding_model.py prices for its placement (the
replicated allgather, the sharded all-to-alls, a ps worker's pull and
push), so the bench checks that model too.

The dense head's share is separate: an allreduce's 2(N - 1)/N of its
bytes each way under Horovod, its variables pulled and its gradient pushed
by a ps worker.
"""
from tools.bench.network import embedding_model

IDS_PER_EXAMPLE = 8
HIDDEN = 16
CLASSES = 2
FLOAT_BYTES = 4
MODES = ("single", "replicated", "sharded", "ps")
_PLACEMENTS = {"replicated": "replicated", "sharded": "sharded",
               "ps": "parameter_server"}


def head_bytes(dimension):
  """Bytes of the dense head's variables (and of their gradient)."""
  weights = dimension * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES
  return weights * FLOAT_BYTES


def sparse_bytes(mode, ids, dimension, trainers):
  """(sent, received) bytes per update of the table's part, as
  tools/bench/network/embedding_model.py prices each placement."""
  if mode == "single":
    return 0, 0
  if mode not in _PLACEMENTS:
    raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
  way = (embedding_model.bytes_sent, embedding_model.bytes_received)
  return tuple(count(_PLACEMENTS[mode], ids, dimension, trainers)
               for count in way)


def dense_bytes(mode, dimension, trainers):
  """(sent, received) bytes per update of the dense head's part."""
  head = head_bytes(dimension)
  if mode == "ps":
    return head, head
  if mode == "single":
    return 0, 0
  both = 2 * (trainers - 1) / trainers * head
  return both, both


def predict(mode, ids, dimension, trainers):
  """{sent, received, sparse_sent, sparse_received, dense_sent,
  dense_received}: bytes per trainer and update."""
  sparse = sparse_bytes(mode, ids, dimension, trainers)
  dense = dense_bytes(mode, dimension, trainers)
  return {"sent": sparse[0] + dense[0], "received": sparse[1] + dense[1],
          "sparse_sent": sparse[0], "sparse_received": sparse[1],
          "dense_sent": dense[0], "dense_received": dense[1]}
