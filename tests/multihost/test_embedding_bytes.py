"""The embeddings bench's quick setting on two shaped hosts of the rig.

docs/EMBEDDINGS.md's reading rests on what this checks from counts on the
links: a sharded table's all-to-all sends fewer bytes per update than a
replicated table's allgather once the ids dominate, a parameter-server
worker's bytes follow the ids it looks up and not the table it trains, and
every count is within a factor of prediction.py's.
"""
from tools.bench.embeddings import __main__ as bench
from tools.bench.embeddings import prediction
from tools.bench.embeddings import render
from tools.bench.network import links

# The wire carries headers, acknowledgements and the exchanges' own
# messages beside the payload, and at few ids these make up most of an
# update's bytes: the larger ids' totals and the bytes per id (the slope
# between the two ids counts) are held within these factors of prediction.
TOTAL_WITHIN = (0.9, 1.5)
PER_ID_WITHIN = (0.85, 1.25)


def test_sparse_bytes_follow_the_ids_and_sharding_sends_less(cluster,
                                                             tmp_path):
  rig = cluster(2)
  links.shape(rig, bench.RATE)
  args = bench.parse_args(["--quick", "--modes=replicated,sharded,ps"])
  result = bench.run_rounds(rig, args, str(tmp_path))
  small, large = args.tables
  few, many = args.ids
  for job in result["samples"]:
    mode, hosts = job.rsplit("-", 1)
    per_id = prediction.sparse_bytes(mode, 1, args.dimension, int(hosts))
    expected = prediction.predict(mode, many, args.dimension, int(hosts))
    for rows in (small, large):
      for index, way in enumerate(("sent", "received")):
        measured = render.figure(result, job, f"{rows}x{many}", way)
        assert (TOTAL_WITHIN[0] < measured / expected[way] <
                TOTAL_WITHIN[1]), (job, rows, way, measured, expected)
        slope, _ = render.per_id(result, job, rows, way)
        assert (PER_ID_WITHIN[0] < slope / per_id[index] <
                PER_ID_WITHIN[1]), (job, rows, way, slope, per_id)

  def sent(job, rows, ids):
    return render.figure(result, job, f"{rows}x{ids}", "sent")

  assert sent("sharded-2", small, many) < sent("replicated-2", small, many)
  for ids in (few, many):
    assert abs(sent("ps-2", large, ids) / sent("ps-2", small, ids) - 1) < 0.2
  assert sent("ps-2", small, many) > 3 * sent("ps-2", small, few)
