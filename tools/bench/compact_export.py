"""Compact exports against the full one: AUC on held-out click logs.

  python -m tools.bench.compact_export            # make bench-compact-export
  python -m tools.bench.compact_export --examples=20000 --capacity=4096
  python -m tools.bench.compact_export --render   # the page from the JSON

One process trains the zoo's wide & deep (`model_zoo/wide_deep.py`) with
dynamic tables on `click_data`'s 63-bit ids (`raw_ids`): each of the 26
categorical columns draws its ids from a Zipf law, so a few ids are seen
thousands of times and most once. It then exports the last checkpoint
whole (float32, every row) and as each compact variant (`VARIANTS`), and
scores the eval split, a draw of the same planted model the training
never saw (the next day's logs), with every SavedModel in a subprocess
that imports TensorFlow alone, as a serving host would. Reports per
export: its variables' bytes, the rows it keeps, the share of the eval
split's id lookups that still find a row, the seconds it took, the AUC and
the AUC less the full export's (with a paired bootstrap interval: a
difference inside it is one the eval split cannot tell from none), and how
far a click probability moves from the full export's. Writes --out (JSON)
and renders --page from it; models and exports live in a temporary folder
deleted at the end.
"""
import argparse
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import estimator_scale as es
from model_zoo import click_data
from model_zoo import wide_deep
from tools import repo

OUT = os.path.join(repo.DOCS, "compact_export.json")
PAGE = os.path.join(repo.DOCS, "COMPACT_EXPORT.md")
COMMAND = "make bench-compact-export"
FULL = "full"
VARIANTS = (
    (FULL, None),
    ("float32", {}),
    ("float16", {"dtype": "float16"}),
    ("int8", {"dtype": "int8"}),
    ("min_count 2", {"min_count": 2}),
    ("min_count 5", {"min_count": 5}),
    ("min_count 5, int8", {"min_count": 5, "dtype": "int8"}),
    ("last_updates 1/4", {"last_updates": "quarter"}),
)
"""(name, CompactExport arguments, None: compact=None); "quarter" is a
quarter of the updates trained, known once the run's steps are. `float32`
(`CompactExport()`) serves every admitted row as trained: against it the
others show what their own cut or dtype changes, apart from what any
compact export drops (a table's empty slots and training bookkeeping)."""

BOOTSTRAP = 200
"""Resamples of the eval split behind each AUC difference's interval."""
_SIZE_LINE = re.compile(
    r"export of .*: ([\d,]+) bytes \(.*\) of variables to write"
    r"(?: \((?P<tables>.*)\))?$")
_TABLES = re.compile(r"([\d,]+) of ([\d,]+) rows as (\w+)")

# Runs in a fresh interpreter without this repository on its path: what a
# serving host has. argv: the eval TFRecord, the batch, then pairs of
# (SavedModel, .npy to write its click probabilities to).
_SCORE = r"""
import sys
import numpy as np
import tensorflow as tf
records, batch = sys.argv[1], int(sys.argv[2])
assert "estimator_scale" not in sys.modules
for path, out in zip(sys.argv[3::2], sys.argv[4::2]):
  serve = tf.saved_model.load(path).signatures["serving_default"]
  key = next(iter(serve.structured_input_signature[1]))
  scores = [serve(**{key: examples})["logistic"].numpy().reshape(-1)
            for examples in tf.data.TFRecordDataset(records).batch(batch)]
  np.save(out, np.concatenate(scores))
"""


class _SizeLines(logging.Handler):
  """The export size lines compact.check_size logs, in order."""

  def __init__(self):
    super().__init__(logging.INFO)
    self.lines = []

  def emit(self, record):
    message = record.getMessage()
    if "of variables to write" in message:
      self.lines.append(message)


def parse_size_line(line):
  """{"bytes", "kept", "capacity", "dtype"} of one size line; the rows are
  None where the line names no dynamic table."""
  match = _SIZE_LINE.search(line)
  if match is None:
    raise ValueError(f"not an export size line: {line!r}")
  found = {"bytes": int(match.group(1).replace(",", "")), "kept": None,
           "capacity": None, "dtype": None}
  rows = _TABLES.findall(match.group("tables") or "")
  if rows:
    found["kept"] = sum(int(k.replace(",", "")) for k, _, _ in rows)
    found["capacity"] = sum(int(c.replace(",", "")) for _, c, _ in rows)
    found["dtype"] = rows[0][2]
  return found


def auc(labels, scores):
  """The area under the ROC curve from ranks (tied scores share their mean
  rank, so a tie counts one half): no scikit-learn needed."""
  labels = np.asarray(labels).astype(bool)
  _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True,
                                 return_counts=True)
  ends = np.cumsum(counts)
  ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]
  positives = int(labels.sum())
  negatives = len(labels) - positives
  return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) /
               (positives * negatives))


def _columns(features):
  """click_data's arrays as the model's dense features: one value per
  example; a missing count reads 0 as the parse spec's default gives it,
  a missing id stays -1, which feature columns drop as an absent id."""
  columns = {}
  for name in click_data.NUMERIC:
    columns[name] = np.nan_to_num(features[name], nan=0.0)[:, None]
  for name in click_data.CATEGORICAL:
    columns[name] = features[name].astype(np.int64)[:, None]
  return columns


def _write_examples(features, labels, path):
  """The eval split as serialized tf.train.Examples, what the exports'
  parsing signature takes."""
  with tf.io.TFRecordWriter(path) as writer:
    for i, label in enumerate(labels):
      writer.write(click_data.example(features, label, i).SerializeToString())


def _directory_bytes(path):
  """What a folder takes on disk: the size a serving host must hold."""
  return sum(os.path.getsize(os.path.join(folder, name))
             for folder, _, names in os.walk(path) for name in names)


def _compact(arguments, updates):
  """The CompactExport of a variant's arguments; None for the full one."""
  if arguments is None:
    return None
  arguments = dict(arguments)
  if arguments.get("last_updates") == "quarter":
    arguments["last_updates"] = max(1, updates // 4)
  return es.CompactExport(**arguments)


def _described(arguments, updates):
  """A variant's CompactExport as its arguments read, quarter resolved."""
  compact = _compact(arguments, updates)
  if compact is None:
    return "compact=None"
  said = [f"{k}={getattr(compact, k)!r}" for k in arguments]
  return "CompactExport(" + ", ".join(said) + ")"


def train(args, model_dir):
  """The trained Estimator, the setup it was trained with, and {column:
  the distinct ids trained}."""
  vocabulary = click_data.RAW_VOCABULARY
  features, labels, _ = click_data.generate(
      "train", args.seed, args.examples, vocabulary, args.zipf_exponent,
      raw_ids=True)
  # Whole batches only, so the ids counted below are the ids trained.
  used = args.examples // args.batch * args.batch
  features = {name: values[:used] for name, values in features.items()}
  labels = labels[:used]
  hparams = {"embedding": "dynamic", "raw_ids": 1, "min_count": 1,
             "steps_to_live": 0, "hash_bucket_size": args.capacity,
             "zipf_exponent": args.zipf_exponent, "data_seed": args.seed}
  estimator = es.make_estimator(
      wide_deep.WideDeep(), model_dir=model_dir, hparams=hparams,
      random_seed=args.seed, save_checkpoints_steps=1 << 30,
      save_summary_steps=1 << 30,
      training_config=es.TrainingConfig(
          optimizer="adagrad",
          learning_rate=args.learning_rate))
  updates = args.epochs * used // args.batch
  began = time.monotonic()
  estimator.train(es.inputs.from_arrays(_columns(features), labels,
                                        args.batch, seed=args.seed),
                  max_steps=updates)
  seconds = time.monotonic() - began
  trained_ids, seen = {}, {}
  for name in click_data.CATEGORICAL:
    trained_ids[name], counts = np.unique(
        features[name][features[name] >= 0], return_counts=True)
    for at_least in (2, 5):
      seen[at_least] = seen.get(at_least, 0) + int((counts >= at_least).sum())
  distinct = [len(ids) for ids in trained_ids.values()]
  setup = {
      "model": "wide_deep", "hparams": hparams, "examples": used,
      "eval_examples": args.eval_examples, "epochs": args.epochs,
      "batch": args.batch, "updates": updates, "optimizer": "adagrad",
      "learning_rate": args.learning_rate, "seed": args.seed,
      "zipf_exponent": args.zipf_exponent,
      "tables": len(click_data.CATEGORICAL),
      "dimension": wide_deep.DEFAULT_HPARAMS["embedding_dim"],
      "capacity_per_table": args.capacity,
      "distinct_ids": sum(distinct), "largest_table_ids": max(distinct),
      "ids_seen_twice": seen[2], "ids_seen_5_times": seen[5],
      "train_seconds": round(seconds, 1)}
  return estimator, setup, trained_ids


def export_all(estimator, updates, base):
  """[(name, arguments, path, seconds, size line)] of every variant."""
  lines = _SizeLines()
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(logging.INFO)  # compact.check_size's line
  logger.addHandler(lines)
  made = []
  try:
    for name, arguments in VARIANTS:
      before = len(lines.lines)
      began = time.monotonic()
      path = estimator.export_saved_model(
          os.path.join(base, re.sub(r"\W+", "_", name)),
          compact=_compact(arguments, updates))
      seconds = time.monotonic() - began
      said = lines.lines[before:]
      made.append((name, arguments, os.fsdecode(path), seconds,
                   said[-1] if said else None))
  finally:
    logger.removeHandler(lines)
    logger.setLevel(level)
  return made


def _full_rows(path):
  """(rows holding an id, rows, bytes of the variables outside dynamic
  tables) of a full export: its size line names no table, and the last
  figure is what every export writes whole."""
  reader = tf.train.load_checkpoint(os.path.join(path, "variables",
                                                 "variables"))
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  tables = [key[:-len("/ids")] for key in shapes
            if key.endswith("/ids") and key[:-len("/ids")] in shapes]
  held = capacity = 0
  for table in tables:
    ids = reader.get_tensor(table + "/ids")
    held += int((ids >= 0).sum())
    capacity += len(ids)
  others = sum(int(np.prod(shape)) * dtypes[key].size
               for key, shape in shapes.items()
               if not any(key == t or key.startswith(t + "/") for t in tables))
  return held, capacity, others


def score(exports, records, batch, scratch):
  """{path: click probabilities} from one TensorFlow-only subprocess."""
  outs = {path: os.path.join(scratch, f"scores{i}.npy")
          for i, path in enumerate(exports)}
  argv = [sys.executable, "-c", _SCORE, records, str(batch)]
  for path, out in outs.items():
    argv += [path, out]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("PYTHONPATH", None)
  subprocess.run(argv, check=True, env=env, cwd=scratch)
  return {path: np.load(out) for path, out in outs.items()}


def run(args):
  """Trains, exports, scores; the results as the JSON holds them."""
  scratch = tempfile.mkdtemp(prefix="compact-export-")
  try:
    estimator, setup, trained_ids = train(args,
                                          os.path.join(scratch, "model"))
    print(f"trained {setup['updates']} updates in "
          f"{setup['train_seconds']:.0f} s", flush=True)
    made = export_all(estimator, setup["updates"],
                      os.path.join(scratch, "exports"))
    features, labels, planted = click_data.generate(
        "eval", args.seed, args.eval_examples, click_data.RAW_VOCABULARY,
        args.zipf_exponent, raw_ids=True)
    records = os.path.join(scratch, "eval.tfrecord")
    _write_examples(features, labels, records)
    scores = score([path for _, _, path, _, _ in made], records, 4096,
                   scratch)
    rows = _rows(made, scores, labels, features, setup["updates"])
    setup["planted_auc"] = round(auc(labels, planted), 4)
    looked_up = {name: features[name][features[name] >= 0]
                 for name in click_data.CATEGORICAL}
    setup["eval_lookups_seen_in_training"] = round(sum(
        int(np.isin(ids, trained_ids[name]).sum())
        for name, ids in looked_up.items()) / sum(
            len(ids) for ids in looked_up.values()), 4)
    setup["bytes_outside_tables"] = _full_rows(made[0][2])[2]
  finally:  # models and exports are of no use once measured
    shutil.rmtree(scratch, ignore_errors=True)
  return {"setup": setup, "variants": rows, "command": COMMAND,
          "bootstrap": BOOTSTRAP,
          "argv": "python -m tools.bench.compact_export " + " ".join(
              f"--{k}={getattr(args, k)}" for k in _SETTINGS),
          "machine": _machine(),
          "date": time.strftime("%Y-%m-%d", time.gmtime())}


_SETTINGS = ("examples", "eval_examples", "capacity", "batch", "epochs",
             "learning_rate", "zipf_exponent", "seed")


def _kept_ids(path):
  """{column: the ids an export serves a row for}, from its variables:
  a compact export's `served_ids`, a full one's `ids` that hold a row."""
  reader = tf.train.load_checkpoint(os.path.join(path, "variables",
                                                 "variables"))
  kept = {}
  for key in reader.get_variable_to_shape_map():
    column = _COLUMN.search(key)
    if column and key.endswith(("/served_ids", "/embedding_weights/ids")):
      ids = reader.get_tensor(key)
      kept[column.group(1)] = ids[ids >= 0]
  return kept


_COLUMN = re.compile(r"/deep/(C\d+)_embedding/")


def table_keys(ids):
  """The keys a dynamic column over a hashed column holds for integer
  `ids`: each id's decimal string fingerprinted to 63 bits, as the column
  hands it to the table (`dynamic_embedding_column`)."""
  return tf.strings.to_hash_bucket_fast(tf.strings.as_string(ids),
                                        (1 << 63) - 1).numpy()


def served_share(kept, keys):
  """Of the eval split's lookups into the dynamic tables (`keys`: {column:
  the table keys looked up}), the share that finds a row; the others read
  zeros."""
  found = sum(int(np.isin(keys[column], ids).sum())
              for column, ids in kept.items())
  return found / sum(len(k) for k in keys.values())


def auc_diff_interval(labels, scores, baseline, rounds=BOOTSTRAP, seed=0):
  """The 2.5 and 97.5 percentiles of AUC(scores) - AUC(baseline) over
  `rounds` resamples of the examples, both scored on the same resample:
  how far a difference this small may be the draw of the eval split."""
  rng = np.random.default_rng(seed)
  differences = []
  for _ in range(rounds):
    pick = rng.integers(0, len(labels), len(labels))
    differences.append(auc(labels[pick], scores[pick]) -
                       auc(labels[pick], baseline[pick]))
  low, high = np.percentile(differences, [2.5, 97.5])
  return float(low), float(high)


def _rows(made, scores, labels, features, updates):
  """One JSON row per export, each against the full one (the first)."""
  keys = {column: table_keys(features[column][features[column] >= 0])
          for column in click_data.CATEGORICAL}
  full_path = made[0][2]
  full_scores = scores[full_path]
  full_auc = auc(labels, full_scores)
  full_bytes = _directory_bytes(os.path.join(full_path, "variables"))
  rows = []
  for name, arguments, path, seconds, line in made:
    size = _directory_bytes(os.path.join(path, "variables"))
    said = parse_size_line(line) if line else {"kept": None,
                                               "capacity": None}
    kept, capacity = said["kept"], said["capacity"]
    if kept is None:
      kept, capacity, _ = _full_rows(path)
    value = auc(labels, scores[path])
    change = np.abs(scores[path] - full_scores)
    low, high = ((0.0, 0.0) if path == full_path else
                 auc_diff_interval(labels, scores[path], full_scores))
    rows.append({
        "variant": name, "compact": _described(arguments, updates),
        "bytes": size, "size_ratio": round(size / full_bytes, 4),
        "rows_kept": kept, "capacity": capacity,
        "logged_bytes": said.get("bytes"),
        "eval_lookups_served": round(
            served_share(_kept_ids(path), keys), 4),
        "export_seconds": round(seconds, 2), "auc": round(value, 5),
        "auc_diff": round(value - full_auc, 5),
        "auc_diff_95": [round(low, 5), round(high, 5)],
        "max_abs_dprob": float(f"{change.max():.3g}"),
        "mean_abs_dprob": float(f"{change.mean():.3g}")})
  return rows


def _machine():
  """What the run's seconds were measured on."""
  return {"cpus": os.cpu_count(), "python": platform.python_version(),
          "tensorflow": tf.__version__}


def render(result):
  """The page's Markdown from the JSON's results."""
  s = result["setup"]
  lines = [
      "# Compact exports against the full export",
      "",
      f"Written by `{result['command']}` (`{result['argv']}`) from "
      "[compact_export.json](compact_export.json); "
      "`python -m tools.bench.compact_export --render` rewrites this page "
      "from it. Run "
      f"{result['date']} on {result['machine']['cpus']} cores, Python "
      f"{result['machine']['python']}, TensorFlow "
      f"{result['machine']['tensorflow']}.",
      "",
      "## How it was made",
      "",
      f"The zoo's wide & deep (`model_zoo/wide_deep.py`, hparams "
      f"`embedding=dynamic`, `raw_ids=1`, `hash_bucket_size="
      f"{s['capacity_per_table']}`) trained one process for "
      f"{s['epochs']} epoch of {s['examples']:,} generated click logs "
      f"(`click_data`, 63-bit ids, Zipf exponent {s['zipf_exponent']}, "
      f"seed {s['seed']}): {s['updates']:,} updates of {s['batch']} "
      f"examples, Adagrad {s['learning_rate']}, in "
      f"{s['train_seconds']:.0f} s. Its {s['tables']} dynamic tables "
      f"(dimension {s['dimension']}, {s['capacity_per_table']:,} rows each, "
      f"every id admitted at its first lookup) saw {s['distinct_ids']:,} "
      f"distinct ids, at most {s['largest_table_ids']:,} in one table, "
      + ("so every id has a row; "
         if s["largest_table_ids"] <= s["capacity_per_table"] else
         "so the fullest tables evicted ids; ")
      + f"{s['ids_seen_twice']:,} of them were seen at "
      f"least twice and {s['ids_seen_5_times']:,} at least 5 times. Of the "
      "eval split's id lookups, "
      f"{s['eval_lookups_seen_in_training']:.1%} are of an id seen in "
      "training: the frequent ids are most of the traffic.",
      "",
      "The last checkpoint was exported whole (`compact=None`: float32, "
      "every row) and as each variant below "
      "(`estimator.export_saved_model(..., compact=es.CompactExport(...))`). "
      f"Each SavedModel then scored the eval split, {s['eval_examples']:,} "
      "examples drawn from the same planted model that training never saw "
      "(the next day's logs), as serialized tf.train.Examples through its "
      "`serving_default` signature, loaded by `tf.saved_model.load` in a "
      "process that imports TensorFlow alone. AUC is exact (from ranks); "
      "the planted probabilities, the best any model can do, reach "
      f"{s['planted_auc']:.4f} on this split. Bytes are those of the "
      "export's `variables/` folder (the wide part's hashed weights and the "
      "dense layers are in every export, in float32); rows kept are over "
      "the dynamic tables, from the size line each export logs (a full "
      "export's: its rows that hold an id). Eval lookups served: of the "
      "eval split's ids looked up in the dynamic tables, the share the "
      "export holds a row for (the others read zeros). The interval of an "
      "AUC difference is the 2.5 and 97.5 percentiles over "
      f"{result.get('bootstrap', BOOTSTRAP)} resamples of the eval split, "
      "both exports scored on the same resample. Δprob: a click "
      "probability less the full export's, on the same example.",
      "",
      "| export | `compact=` | rows kept | of capacity | eval lookups "
      "served | variables MiB | size / full | export s | AUC | AUC - full "
      "(95 % interval) | max abs. Δprob | mean abs. Δprob |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for row in result["variants"]:
    lines.append(
        f"| {row['variant']} | `{row['compact']}` | {row['rows_kept']:,} | "
        f"{row['rows_kept'] / row['capacity']:.1%} | "
        f"{row['eval_lookups_served']:.1%} | "
        f"{row['bytes'] / 2**20:.1f} | {row['size_ratio']:.3f} | "
        f"{row['export_seconds']:.1f} | {row['auc']:.4f} | "
        f"{_signed(row['auc_diff'], 5)}{_interval(row)} | "
        f"{row['max_abs_dprob']:.3g} | "
        f"{row['mean_abs_dprob']:.2g} |")
  lines += ["", "## Reading", ""] + _reading(result) + [
      "", "To measure again: `make bench-compact-export` (a few minutes on "
      "two cores; it writes compact_export.json and this page), or "
      "`python -m tools.bench.compact_export --help` for smaller runs.", ""]
  return "\n".join(lines)


def _interval(row):
  """ (low, high) after a difference, nothing for the full export."""
  low, high = row["auc_diff_95"]
  if row["variant"] == FULL:
    return ""
  return f" ({_signed(low, 5)}, {_signed(high, 5)})"


def _signed(value, digits):
  """`value` with its sign, but a difference that rounds to nothing as
  0 (no "-0.00000")."""
  value = round(value, digits)
  return f"{0.0:.{digits}f}" if value == 0 else f"{value:+.{digits}f}"


def _reading(result):
  """A few sentences drawn from the figures, so a rerun rewrites them."""
  rows = {row["variant"]: row for row in result["variants"]}
  full_bytes = rows[FULL]["bytes"]
  said = []
  if "float32" in rows:
    row = rows["float32"]
    said.append(
        f"- **float32** (`CompactExport()`) serves every admitted row as "
        f"trained, in {row['size_ratio']:.0%} of the full export's bytes: "
        "the full export also writes each table's empty slots and what "
        "training keeps per row (its id's count, last update, admission), "
        "which serving never reads; "
        + ("it serves the same probabilities, bit for bit."
           if row["max_abs_dprob"] == 0 else
           f"its probabilities differ by at most "
           f"{row['max_abs_dprob']:.2g}."))
  for name in ("float16", "int8"):
    if name in rows:
      row = rows[name]
      said.append(
          f"- **{name}** keeps every admitted row in "
          f"{row['size_ratio']:.0%} of the full export's bytes; "
          + ("AUC is unchanged to 5 decimals"
             if round(row["auc_diff"], 5) == 0 else
             f"AUC moves by {_signed(row['auc_diff'], 5)}")
          + " and no probability moves by more than "
          f"{row['max_abs_dprob']:.2g}.")
  for name, row in rows.items():
    if name.startswith(("min_count", "last_updates")):
      low, high = row["auc_diff_95"]
      said.append(
          f"- **{name}** keeps {row['rows_kept'] / rows[FULL]['rows_kept']:.1%}"
          f" of the full export's rows, in {row['size_ratio']:.0%} of its "
          f"bytes, and still serves {row['eval_lookups_served']:.1%} of the "
          f"eval split's lookups; AUC {_signed(row['auc_diff'], 5)}, "
          + ("an interval that holds 0: no change the eval split can tell"
             if low <= 0 <= high else "an interval clear of 0")
          + f" (largest probability change {row['max_abs_dprob']:.2g}, mean "
          f"{row['mean_abs_dprob']:.2g}).")
  said.append(
      "- A row left out serves zeros, as an id never seen does. A cut's AUC "
      "difference is what the left-out rows were worth on the next day's "
      "logs: an id seen once or twice has moved little from its random "
      "first vector, so serving zeros in its place can rank as well or "
      "better. The size ratio has a floor: the wide part's hashed weights "
      "and the dense layers, which every export keeps whole in float32 ("
      f"{result['setup']['bytes_outside_tables'] / 2**20:.1f} MiB, "
      f"{result['setup']['bytes_outside_tables'] / full_bytes:.0%} of the "
      "full export).")
  return said


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--examples", type=int, default=600_000)
  parser.add_argument("--eval_examples", type=int, default=50_000)
  parser.add_argument("--capacity", type=int, default=131_072,
                      help="rows of each dynamic table")
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--learning_rate", type=float, default=0.05)
  parser.add_argument("--zipf_exponent", type=float,
                      default=click_data.ZIPF_EXPONENT)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=OUT)
  parser.add_argument("--page", default=PAGE)
  parser.add_argument("--render", action="store_true",
                      help="only rewrite --page from --out")
  args = parser.parse_args(argv)
  if not args.render:
    repo.write(args.out, json.dumps(run(args), indent=1) + "\n")
  page = render(repo.load_json(args.out))
  repo.write(args.page, page)
  print(page)


if __name__ == "__main__":
  main()
