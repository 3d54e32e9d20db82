"""docs/PS_SPEED.md from results/ps_speed.json and results/peer_speed.json.

Each ratio is the median over rounds of the ratio taken within a round (the
two sides ran one right after the other), as tools/bench/perf's rows are;
each examples/sec figure is the median of the rounds' measurements.
"""
import os

from tools import repo
from tools.bench.perf.results import median
from tools.bench.perf.results import paired_ratios

_HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(_HERE, "results", "ps_speed.json")
PEER_RESULTS = os.path.join(_HERE, "results", "peer_speed.json")
TEMPLATE = os.path.join(_HERE, "PS_SPEED.md.template")
PAGE = os.path.join(repo.DOCS, "PS_SPEED.md")
SMOKE = ("**Shorter than the defaults**: this run had fewer rounds or "
         "shorter windows than `make bench-ps-speed` runs (its settings are "
         "below); the per-round columns show how far its rounds agree.")
LABELS = {"one": "1 process", "async": "asynchronous PS (chief + worker + ps)",
          "sync": "synchronous PS, `--ps_sync` (chief + worker + ps)",
          "estimator_scale": "estimator_scale (census zoo model)",
          "deepctr": "DeepCTR 0.9.4 `WDLEstimator`"}


def rates(result, name):
  """The examples/sec of `name` in each round (None where it failed)."""
  return [m and m["examples_per_sec"] for m in result["samples"][name]]


def ratio(result, name, base):
  """(median, per-round list) of name's examples/sec over base's."""
  per_round = paired_ratios(rates(result, name), rates(result, base))
  return median(per_round), per_round


def _cells(values, digits=3):
  return ", ".join("failed" if v is None else repo.fmt(v, digits)
                   for v in values)


def speed_table(result, base):
  """Every sample's median examples/sec and its ratio to `base`'s."""
  lines = [f"| | examples/sec (median) | per round | / {LABELS[base]} | "
           "per round |", "|---|---:|---|---:|---|"]
  for name in result["samples"]:
    own = rates(result, name)
    mid, per_round = ratio(result, name, base)
    against = ("-", "-") if name == base else (repo.fmt(mid),
                                               _cells(per_round))
    lines.append(f"| {LABELS[name]} | {repo.fmt(median(own))} | "
                 f"{_cells(own)} | {' | '.join(against)} |")
  return "\n".join(lines)


def runs_table(result):
  """Each job's runs per trainer and global_step's advance in the window."""
  lines = ["| round | job | runs per trainer | global_step advance |",
           "|---:|---|---|---:|"]
  for name, samples in result["samples"].items():
    for index, m in enumerate(samples, 1):
      if m:
        runs = ", ".join(f"{task} {count}" for task, count
                         in sorted(m["runs_by_task"].items()))
        lines.append(f"| {index} | {LABELS[name]} | {runs} | "
                     f"{m['global_steps']} |")
  return "\n".join(lines)


def run_line(result):
  """When and where it ran, with the smoke warning where it applies."""
  m = result["machine"]
  line = (f"Run {m['date']} on {m['summary']}; load average at the start "
          f"{', '.join(map(str, m['load_average_at_start']))}, at the end "
          f"{', '.join(map(str, m['load_average_at_end']))}; "
          f"{result['rounds']} round(s).")
  return f"{SMOKE}\n\n{line}" if result["smoke"] else line


def ps_fields(result):
  if result is None:
    missing = "Not measured yet: `make bench-ps-speed`."
    return dict(ps_run=missing, ps_settings="", ps_table="", ps_runs="")
  s = result["settings"]
  return dict(
      ps_run=run_line(result),
      ps_settings=(f"Global batch {s['global_batch']}, {s['optimizer']}, "
                   f"{s['threads']} thread(s) per op in every process; "
                   f"windows of {s['window_s']:g} s opening "
                   f"{s['warmup_s']:g} s after the last trainer's first "
                   "update."),
      ps_table=speed_table(result, "one"), ps_runs=runs_table(result))


def peer_fields(result):
  if result is None:
    missing = ("Not measured yet: `make bench-ps-speed` (after `make setup`, "
               "which extracts the census data).")
    return dict(peer_run=missing, peer_settings="", peer_table="")
  return dict(
      peer_run=run_line(result),
      peer_settings=(f"{result['model']}, global batch "
                     f"{result['global_batch']}, {result['threads']} "
                     f"thread(s) per op; {result['steps']:,} timed updates "
                     f"after {result['warmup']:,} untimed."),
      peer_table=speed_table(result, "deepctr"))


def page(ps_result, peer_result):
  """The page's text from the two results (None: not measured yet)."""
  return repo.fill_template(
      TEMPLATE, {**ps_fields(ps_result), **peer_fields(peer_result)})


def write(results=RESULTS, peer_results=PEER_RESULTS, path=PAGE):
  """Renders the page from the saved results; returns its text."""
  text = page(repo.load_json(results), repo.load_json(peer_results))
  repo.write(path, text)
  return text
