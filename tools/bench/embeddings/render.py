"""docs/EMBEDDINGS.md from results/embeddings.json and the template.

Every figure is the median over rounds; a ratio of examples/sec divides a
job's rate by the one process's rate of the same round first. Beside each
measured byte count is prediction.py's; bytes per id is the slope between
the two smallest ids counts of a table, which cancels what an update sends
whatever its ids (the dense head, the collectives' and gRPC's own
messages), and that fixed part is shown too.
"""
import os

from tools import repo
from tools.bench.embeddings import measure
from tools.bench.embeddings import prediction
from tools.bench.perf.results import median
from tools.bench.perf.results import paired_ratios

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "EMBEDDINGS.md.template")


def _rounds(result, job, config):
  """The job's figures of `config` per round (None where it failed)."""
  return [r.get(config) for r in result["samples"].get(job, [])]


def figure(result, job, config, field):
  """Median over rounds of one field of a job's configuration."""
  return median([r and r.get(field) for r in _rounds(result, job, config)])


def speed_ratio(result, job, config):
  """Median over rounds of the job's examples/sec over one process's."""
  rates = [[r and r["examples_per_sec"] for r in _rounds(result, j, config)]
           for j in (job, "single-1")]
  return median(paired_ratios(*rates)) if all(rates) else None


def per_id(result, job, rows, way="sent"):
  """(measured bytes per id, fixed bytes per update) between the two
  smallest ids counts; (None, None) where either was not measured."""
  low, high = sorted(result["ids"])[:2]
  at = [figure(result, job, f"{rows}x{ids}", way) for ids in (low, high)]
  if None in at:
    return None, None
  slope = (at[1] - at[0]) / (high - low)
  return slope, at[0] - slope * low


def _split(job):
  mode, hosts = job.rsplit("-", 1)
  return mode, int(hosts)


def _bytes(value, predicted):
  if value is None:
    return "n/a"
  return f"{repo.fmt(value)} ({repo.fmt(predicted)})"


def _ratio(value):
  return "n/a" if value is None else f"{value:.2f}"


def _configs(result):
  """(rows, ids, "ROWSxIDS") of every configuration, tables first."""
  return [(rows, ids, f"{rows}x{ids}") for rows in result["tables"]
          for ids in result["ids"]]


def horovod_table(result, hosts):
  """Replicated against sharded on `hosts` hosts, by table and ids."""
  lines = ["| table rows | ids per rank | replicated: B sent per rank and "
           "update (predicted) | sharded (predicted) | sharded / replicated "
           "| ex/s replicated / 1 process | ex/s sharded / 1 process |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
  jobs = [f"{mode}-{hosts}" for mode in ("replicated", "sharded")]
  for rows, ids, config in _configs(result):
    sent = [figure(result, job, config, "sent") for job in jobs]
    expected = [prediction.predict(_split(job)[0], ids, result["dimension"],
                                   hosts)["sent"] for job in jobs]
    share = None if None in sent else sent[1] / sent[0]
    lines.append(
        f"| {rows:,} | {ids:,} | {_bytes(sent[0], expected[0])} | "
        f"{_bytes(sent[1], expected[1])} | {_ratio(share)} "
        f"({expected[1] / expected[0]:.2f}) | "
        + " | ".join(_ratio(speed_ratio(result, job, config)) for job in jobs)
        + " |")
  return "\n".join(lines)


def ps_table(result):
  """A ps worker's bytes per update, sent and received, by table and ids."""
  lines = ["| table rows | ids per worker | B sent per update (predicted) | "
           f"B received (predicted) | ex/s {measure.PS_HOSTS} workers / 1 "
           "process |",
           "|---:|---:|---:|---:|---:|"]
  job = f"ps-{measure.PS_HOSTS}"
  for rows, ids, config in _configs(result):
    expected = prediction.predict("ps", ids, result["dimension"],
                                  measure.PS_HOSTS)
    cells = [_bytes(figure(result, job, config, way), expected[way])
             for way in ("sent", "received")]
    lines.append(f"| {rows:,} | {ids:,} | {' | '.join(cells)} | "
                 f"{_ratio(speed_ratio(result, job, config))} |")
  return "\n".join(lines)


def per_id_table(result):
  """Bytes per id and the fixed part per update, every job and table."""
  lines = ["| job | table rows | B sent per id (predicted) | B received "
           "per id (predicted) | fixed B sent per update (dense head "
           "predicted) |", "|---|---:|---:|---:|---:|"]
  for job in result["samples"]:
    mode, hosts = _split(job)
    if mode == "single":
      continue
    sparse = prediction.sparse_bytes(mode, 1, result["dimension"], hosts)
    dense = prediction.dense_bytes(mode, result["dimension"], hosts)
    for rows in result["tables"]:
      sent, fixed = per_id(result, job, rows)
      received, _ = per_id(result, job, rows, "received")
      lines.append(f"| {job} | {rows:,} | {_bytes(sent, sparse[0])} | "
                   f"{_bytes(received, sparse[1])} | "
                   f"{_bytes(fixed, dense[0])} |")
  return "\n".join(lines)


def page(result):
  """The page's text; says how to measure where there is no result."""
  if result is None:
    body = ("Not measured yet: run `make bench-embeddings` (root; see "
            "Reproduce).")
    fields = dict(run=body, horovod=body, ps="", per_id="")
  else:
    m = result["machine"]
    fields = dict(
        run=(f"Run {m['date']} on {m['summary']}, load average at the end "
             f"{', '.join(map(str, m['load_average_at_end']))}; "
             f"{result['rounds']} round(s) of {result['steps']} measured "
             f"updates after {result['warmup']} untimed, table rows x "
             f"{result['dimension']} float32, links at {result['rate']}."),
        horovod="\n\n".join(
            f"### {hosts} hosts x 1 rank\n\n{horovod_table(result, hosts)}"
            for hosts in result["hosts"]),
        ps=ps_table(result), per_id=per_id_table(result))
  return repo.fill_template(TEMPLATE, fields)
