"""What an update should put on a trainer's link, from the model's shapes.

The bench prints these beside what it counts on the rig's links, so each
measured figure can be checked by hand. This module is the one place the
bench model's shapes live (worker.py builds the model from them), and it
imports no TensorFlow: the bench's driver reads it.

Per trainer and update, with U ids looked up (all distinct, worker.py
draws them so), D the vector length and N trainers:

- replicated (Horovod's allgather of the rows touched, ring-wise in Gloo):
  every rank's U rows and their int64 indices pass N - 1 links, so a rank
  sends (N - 1) U (4D + 8) bytes and receives as much;
- sharded (`es.sharded_embedding`): the ids travel to their owners
  ((N - 1)/N of them live elsewhere), the rows come back, and the
  gradient of those rows goes to the owners again: (N - 1)/N U (8 + 4D +
  4D) each way;
- ps (a parameter-server worker): it sends the ids to gather and the
  gradient's rows with their indices, U (8 + 4D + 8), and receives the
  rows, 4DU.

The dense head's share is separate: an allreduce's 2(N - 1)/N of its
bytes each way under Horovod, its variables pulled and its gradient pushed
by a ps worker.
"""
IDS_PER_EXAMPLE = 8
HIDDEN = 16
CLASSES = 2
FLOAT_BYTES = 4
ID_BYTES = 8
MODES = ("single", "replicated", "sharded", "ps")


def head_bytes(dimension):
  """Bytes of the dense head's variables (and of their gradient)."""
  weights = dimension * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES
  return weights * FLOAT_BYTES


def sparse_bytes(mode, ids, dimension, trainers):
  """(sent, received) bytes per update of the table's part; see above."""
  row = dimension * FLOAT_BYTES
  if mode == "replicated":
    both = (trainers - 1) * ids * (row + ID_BYTES)
    return both, both
  if mode == "sharded":
    both = (trainers - 1) / trainers * ids * (ID_BYTES + 2 * row)
    return both, both
  if mode == "ps":
    return ids * (ID_BYTES + row + ID_BYTES), ids * row
  if mode == "single":
    return 0, 0
  raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")


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
