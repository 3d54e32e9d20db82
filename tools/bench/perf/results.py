"""From measurements to the rows of bench.json: within-round ratios, medians.

A row's ratio is the median over rounds of ours / peer taken within each
round, not the ratio of the two medians: the two sides of a round ran one
right after the other, so a within-round ratio cancels the drift of a
shared machine that a ratio of medians over the whole run would keep.
"""
import operator
import statistics

from tools.bench.perf import variants

_MEETS = {variants.AT_LEAST: operator.ge, variants.AT_MOST: operator.le}


def median(values):
  """The median of the values measured (None: failed runs), or None."""
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def paired_ratios(ours, peer):
  """ours[i] / peer[i] for every round i where both sides were measured."""
  return [a / b for a, b in zip(ours, peer)
          if a is not None and b is not None and b > 0]


def make_row(spec, samples):
  """One bench.json row from a ROWS entry and {variant: [measurement]}.

  A measurement is runner.combine's dict (examples_per_sec, peak_rss_mib,
  seconds, cores_used; a startup run's worker.STARTUP_FIELDS too), or None
  when that run failed.
  """
  spec = variants.RowSpec(*spec)
  pick = lambda name, k=variants.FIELD[spec.metric]: [
      m and m.get(k) for m in samples.get(name, [])]
  ours_values, peer_values = pick(spec.ours), pick(spec.peer)
  ratios = paired_ratios(ours_values, peer_values)
  ratio = median(ratios)
  met = (None if spec.target is None or ratio is None
         else _MEETS[spec.direction](ratio, spec.target))
  return {"id": spec.id, "name": spec.description, "ours": spec.ours,
          "peer": spec.peer, "ours_median": median(ours_values),
          "peer_median": median(peer_values), "unit": spec.metric,
          "ratio": ratio, "target": spec.target,
          "direction": spec.direction, "met": met, "ours_samples": ours_values,
          "peer_samples": peer_values, "ratio_samples": ratios,
          "ours_cores_per_process": median(pick(spec.ours, "cores_used")),
          "peer_cores_per_process": median(pick(spec.peer, "cores_used")),
          "shortest_window_seconds": min(
              filter(None, pick(spec.ours, "seconds") +
                     pick(spec.peer, "seconds")), default=None)}


def build_result(samples, machine, rounds_done):
  """bench.json: the machine, the rounds run and every row of ROWS."""
  return {"machine": machine, "rounds": rounds_done,
          "rows": [make_row(spec, samples) for spec in variants.ROWS]}
