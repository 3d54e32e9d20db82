"""Every flag of the command line, grouped by what it sets.

Enum flags offer the library's own TensorFlow-free lists, so `--help`
shows every choice without loading TensorFlow.
"""
from absl import flags

import estimator_scale as es
from estimator_scale import choices

FLAGS = flags.FLAGS

# The model.
flags.DEFINE_string("model", "digits_cnn", "Registered model name.")
flags.DEFINE_string("model_module", None,
                    "Python module to import first; it registers your models.")
flags.DEFINE_string("hparams", "", "Model hyperparameters: a=1,b=0.5.")
flags.DEFINE_integer("random_seed", 0, "Graph-level random seed.")

# The data.
flags.DEFINE_string("train_data", None,
                    "Glob of TFRecord files (or CSV files: *.csv) to train "
                    "on, read by the model's feature spec; any tf.io.gfile "
                    "path (gs://; s3:// and hdfs:// with the s3 extra). "
                    "Default: the model's own data.")
flags.DEFINE_string("eval_data", None,
                    "Glob of TFRecord or CSV files to evaluate on.")
# The names the data-engineering side uses for the same globs or roots.
flags.DEFINE_alias("train_files", "train_data")
flags.DEFINE_alias("eval_files", "eval_data")
flags.DEFINE_string("days", None,
                    "Train dated partitions, each day once, in order: "
                    "FIRST:LAST (YYYY-MM-DD:YYYY-MM-DD), one day "
                    "(YYYY-MM-DD), or FIRST: (every day from then on, with "
                    "--follow). --train_data (and --eval_data, default the "
                    "same) is then the root of the days: day=YYYY-MM-DD/ "
                    "folders or files with the date in their names. Each "
                    "day is evaluated on the next, exported to "
                    "--export_dir/<day>/ (default <model_dir>/export) and "
                    "the best by --export_best (default auc:max) named in "
                    "export/best.json; the summary per day is "
                    "<model_dir>/days.json, days.md and auc_by_day.png.")
flags.DEFINE_bool("follow", False,
                  "--days: wait for each day to land (its _SUCCESS marker) "
                  "instead of failing, up to --follow_timeout_secs each.")
flags.DEFINE_integer("follow_timeout_secs", 3600,
                     "--follow: the longest wait for one day; a range "
                     "without a last day stops there, one with it fails.",
                     lower_bound=0)
DAY_FLAGS = ("follow", "follow_timeout_secs")
"""Flags that only --days takes."""
NOT_BY_DAY_FLAGS = ("train_steps", "eval_every_n_steps", "eval_every_secs",
                    "early_stopping")
"""Flags that --days replaces: a day's examples say how long it trains."""
flags.DEFINE_bool("skip_corrupt_records", False,
                  "Skip unreadable TFRecord records instead of failing.")
flags.DEFINE_integer("global_batch_size", 64,
                     "Examples per step, summed over all workers and "
                     "replicas, on every backend: each replica reads "
                     "global_batch_size / (workers x replicas). Synchronous "
                     "backends average them in one update; asynchronous "
                     "parameter servers (no --ps_sync) apply each worker's "
                     "share, global_batch_size / workers, as an update of "
                     "its own, and S (so the rate --lr_scaling gives) and "
                     "each of the --train_steps updates are that share's.",
                     lower_bound=1)

# Training: the optimizer, its learning rate and how it scales.
flags.DEFINE_integer("train_steps", 1000, "Updates to train (from step 0).",
                     lower_bound=1)
flags.DEFINE_enum("optimizer", "momentum", choices.OPTIMIZERS,
                  "The optimizer; the flags below set the options it takes.")
flags.DEFINE_enum("linear_optimizer", None, choices.OPTIMIZERS,
                  "The optimizer of the model's linear part (its variables "
                  "built in estimator_scale.linear_part(): wide & deep's "
                  "wide part, MovieLens' biases), e.g. ftrl beside "
                  "--optimizer=adagrad; unset: --optimizer's. Each option "
                  "flag below goes to each of the two that takes it.")
flags.DEFINE_float("learning_rate", 0.05, "Base (S = 1) learning rate.")
flags.DEFINE_float("momentum", 0.9, "Momentum of `momentum` and `lars`.")
flags.DEFINE_float("weight_decay", None,
                   "Weight decay of `adamw`, `lamb` (decoupled) and `lars` "
                   "(unset: each one's default, 0.01 for adamw and lamb, "
                   "1e-4 for lars).")
flags.DEFINE_float("trust_coefficient", 0.001,
                   "LARS's trust coefficient eta.")
flags.DEFINE_float("initial_accumulator_value", None,
                   "Starting value of `adagrad`'s and `ftrl`'s squared-"
                   "gradient sums (unset: 0.1).", lower_bound=0.0)
flags.DEFINE_float("l1", None, "`ftrl`'s L1 strength (unset: 0).",
                   lower_bound=0.0)
flags.DEFINE_float("l2", None, "`ftrl`'s stabilising L2 strength (unset: 0).",
                   lower_bound=0.0)
flags.DEFINE_float("l2_shrinkage", None,
                   "`ftrl`'s L2 shrinkage of the weights (unset: 0).",
                   lower_bound=0.0)
flags.DEFINE_enum("lr_schedule", "constant", choices.SCHEDULES,
                  "How the base rate decays over the updates.")
flags.DEFINE_list("lr_boundaries", [], "`piecewise` decay steps.")
flags.DEFINE_float("lr_decay_rate", 0.1, "`piecewise` factor per boundary.")
flags.DEFINE_integer("lr_decay_steps", 0, "`cosine`/`polynomial` length.")
flags.DEFINE_float("lr_power", 1.0, "`polynomial` exponent.")
flags.DEFINE_integer("warmup_steps", 0, "Linear warm-up of the base rate.")
flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per update.")
flags.DEFINE_enum("lr_scaling", "identity", choices.LR_SCALING_RULES,
                  "How the learning rate grows with the scale S.")
flags.DEFINE_float("batch_scale", None,
                   "S: how many times the S = 1 batch (one micro-batch) an "
                   "update averages; default workers x replicas x "
                   "accumulation_steps.")
flags.DEFINE_integer("scaling_warmup_updates", 0,
                     "`linear` scaling's warm-up, in updates.")
flags.DEFINE_float("scale_invariant_steps", None,
                   "Stop when AdaScale's progress tau reaches this.")
flags.DEFINE_float("adascale_smoothing", None,
                   "AdaScale's moving-average factor in [0, 1); default "
                   "max(1 - n/1000, 0), n = gradient samples per update. "
                   "Lower it for runs of few updates.")
flags.DEFINE_enum("adascale_parts", "all", choices.ADASCALE_PARTS,
                  "With --lr_scaling=adascale: one gain for every variable, "
                  "or one for the embedding tables and one for the dense "
                  "variables (tau advances by the dense one).")
flags.DEFINE_float("cowclip_ratio", None,
                   "`cowclip`'s r > 0: an id's gradient is clipped to r "
                   "times its row's norm, per occurrence; default 1.")
flags.DEFINE_float("cowclip_min_norm", None,
                   "`cowclip`'s floor zeta >= 0 of that bound, for new and "
                   "small rows; default 1e-5.")
flags.DEFINE_enum("precision", "float32", choices.PRECISIONS,
                  "The network's compute type; variables and the optimizer "
                  "stay float32; mixed_float16 adds dynamic loss scaling.")

OPTIMIZER_OPTION_FLAGS = ("momentum", "trust_coefficient", "weight_decay",
                          "initial_accumulator_value", "l1", "l2",
                          "l2_shrinkage")
"""Flags named after the optimizer option they set."""

# Distribution: the backend, and what it does on the wire and on the cores.
flags.DEFINE_enum("distribution", "none", choices.DISTRIBUTIONS,
                  "How the job runs.")
flags.DEFINE_integer("replicas", None, "`mirrored` replicas in this process.")
flags.DEFINE_bool("ps_sync", False,
                  "parameter_server: each update averages every worker's "
                  "gradients, applied once (default: asynchronous).")
flags.DEFINE_enum("allreduce_compression", "none", choices.COMPRESSIONS,
                  "16-bit gradients on the wire of the allreduce "
                  "(--distribution=horovod).")
flags.DEFINE_enum("sparse_exchange", "auto", choices.SPARSE_EXCHANGES,
                  "How Horovod exchanges sparse (embedding) gradients: as "
                  "the rows touched, as a dense table, or chosen per update "
                  "by how many rows the ranks touch.")
flags.DEFINE_integer("intra_op_threads", None,
                     "Threads per op (default: cores, / ranks per host).",
                     lower_bound=1)
flags.DEFINE_integer("commit_every_n_steps",
                     choices.COMMIT_EVERY_N_STEPS,
                     "Elastic Horovod: updates between commits (rank 0's "
                     "checkpoints), the work a lost rank may cost.",
                     lower_bound=1)
flags.DEFINE_enum("elastic_batch", "scale",
                  choices.ELASTIC_BATCH_POLICIES,
                  "Elastic Horovod, when the ranks change: `scale` keeps "
                  "each rank's batch, so the global batch and S follow the "
                  "size (with AdaScale its gain follows S); `hold` keeps "
                  "the global batch by changing --accumulation_steps.")

ELASTIC_FLAGS = ("commit_every_n_steps", "elastic_batch")
"""Flags that only an elastic Horovod job takes."""

# Evaluation and export.
flags.DEFINE_integer("eval_steps", None,
                     "Evaluation batches (default: the whole eval set).",
                     lower_bound=1)
flags.DEFINE_integer("eval_every_n_steps", None,
                     "Evaluate every this many updates (default: once, at "
                     "the end).", lower_bound=1)
flags.DEFINE_integer("eval_every_secs", None,
                     "Evaluate after each checkpoint once this many seconds "
                     "have passed since the last evaluation.", lower_bound=0)
flags.DEFINE_string("export_best", None,
                    "METRIC:min or METRIC:max, e.g. loss:min or "
                    "accuracy:max: export a SavedModel under "
                    "<model_dir>/export/best whenever an evaluation is the "
                    "best so far.")
flags.DEFINE_integer("early_stopping", None,
                     "Stop after this many evaluations in a row without "
                     "improving --export_best's metric (loss:min if unset).",
                     lower_bound=1)
flags.DEFINE_string("export_dir", None, "Export a SavedModel under here.")
flags.DEFINE_integer("export_min_count", 1,
                     "Export only the dynamic tables' rows looked up at "
                     "least this many times.", lower_bound=1)
flags.DEFINE_integer("export_last_updates", None,
                     "Export only the dynamic tables' rows looked up within "
                     "this many updates before the checkpoint.",
                     lower_bound=1)
flags.DEFINE_enum("export_dtype", "float32", ["float32", "float16", "int8"],
                  "How an export stores the dynamic tables' rows (int8: "
                  "with a scale per row).")
flags.DEFINE_integer("export_max_bytes", None,
                     "Refuse an export whose variables would take more "
                     "bytes (its size is logged before it is written).",
                     lower_bound=1)
flags.DEFINE_string("checkpoint", None,
                    "evaluate/export: this checkpoint (a path or a name in "
                    "--model_dir) instead of the latest.")

# Checkpoints, logging and the run's summary.
flags.DEFINE_string("model_dir", None,
                    "Checkpoint directory (default: a new temporary "
                    "directory). TF_CONFIG workers must share it: a shared "
                    "file system, s3:// or gs://; Horovod reads rank 0's.")
flags.DEFINE_integer("save_checkpoints_steps", 500, "Checkpoint interval.",
                     lower_bound=1)
flags.DEFINE_integer("full_checkpoint_every", 1,
                     "One save in this many is a full checkpoint; the others "
                     "write only the tables' rows changed since the "
                     "save before (--distribution=none, horovod, or "
                     "parameter_server with --ps_sync).", lower_bound=1)
flags.DEFINE_integer("log_every_n_steps", 100,
                     "Updates between progress lines (and, with several "
                     "synchronous workers, lines of each one's compute "
                     "time naming the slow hosts).",
                     lower_bound=1)
flags.DEFINE_string("summary_json", None, "Write the run summary here.")

PATH_FLAGS = ("model_dir", "train_data", "eval_data", "export_dir",
              "checkpoint", "summary_json")
"""Flags that name a file or directory, on any file system."""


def _split_best(text):
  name, _, direction = (text or "loss:min").partition(":")
  return name, direction


flags.register_validator(
    "export_best",
    lambda text: all(_split_best(text)) and _split_best(text)[1] in (
        "min", "max"),
    message="must be METRIC:min or METRIC:max, e.g. loss:min or accuracy:max")


def compact_export():
  """The es.CompactExport the --export_* flags ask for, or None."""
  wanted = es.CompactExport(
      min_count=FLAGS.export_min_count,
      last_updates=FLAGS.export_last_updates, dtype=FLAGS.export_dtype,
      max_bytes=FLAGS.export_max_bytes)
  return wanted if wanted != es.CompactExport() else None


def best_metric():
  """(metric name, higher_is_better) of --export_best, default loss:min."""
  name, direction = _split_best(FLAGS.export_best)
  return name, direction == "max"
