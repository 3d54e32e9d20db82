"""What the bench runs and what each row of docs/BENCH.md compares.

VARIANTS are the measurements: a launcher, a number of processes and the
flags of tools/bench/perf/worker.py. ROWS pair two variants on one metric with a
target; GROUPS set the order a round runs them in, so the two sides of a row
alternate. The step counts size each measurement's timed window: a row
whose steps change is no longer comparable with the page's earlier figures.
"""
import collections

# Steps size each timed window so that this shared host's noise averages
# out within it: a window of a few seconds moves a ratio by more than the
# margin its target leaves. The weak-scaling rows time at least 20 s, the
# rows whose ratios sit close to their targets (1b, 2a, 5b) about 10 s, and
# rows far from their targets less, so that 3 rounds fit `make bench`.
_DIGITS = dict(model="digits_cnn", batch=64, warmup=20, steps=300)
_RESNET = dict(model="resnet20", batch=32, warmup=3, steps=250)
# Scaling (row 4): one intra- and inter-op thread per process, so a process
# is one core's work and 2 processes on this 2-core host can reach 2.0x.
# Weak scaling keeps the per-replica batch; strong scaling keeps the global.
# Rows 4c, 4g and 4h have no 20 s rule and keep shorter windows.
_WEAK = dict(model="resnet20", batch=32, warmup=5, steps=250, threads=1)
_WEAK_SHORT = dict(_WEAK, steps=60)
_STRONG_SINGLE = dict(_WEAK, batch=64, steps=60)
# digits_cnn at 64 per replica updates in a few milliseconds, so its rows
# would time the allreduce's latency, not scaling; 256 per replica gives
# each update enough compute to dominate the exchange.
_WEAK_DIGITS = dict(model="digits_cnn", batch=256, warmup=10, steps=1000,
                    threads=1)
# Accumulation: k = 4 micro-batches of 32. Ours reads all 4 in one run;
# the per-micro-batch peers run 4 times as often for the same examples.
_K, _MICRO = 4, 32
_ACCUM = dict(model="digits_cnn", batch=_K * _MICRO, accumulation_steps=_K,
              lr_scaling="linear", warmup=10, steps=120)
_MICRO_RUNS = dict(_ACCUM, batch=_MICRO, warmup=_K * 10, steps=_K * 120,
                   lr_scaling="identity", learning_rate=0.04)
# Row 2a's pair, timed longer than the rest of rows 2-3 (its ratio sits
# close to its target).
_ACCUM_LONG = dict(_ACCUM, steps=900)
_MICRO_RUNS_LONG = dict(_MICRO_RUNS, steps=_K * 900)
_PIPE = dict(batch=64, warmup=50, steps=16000)
# What accumulation costs before training is under way: a fresh process
# builds the graph and trains its first update and 3 more, k micro-batches
# of 8 per update, nothing else (no evaluation).
STARTUP_MICRO, STARTUP_UPDATES, STARTUP_K = 8, 4, 64


# Sparse accumulation: the same micro-batch of 256 examples (8 lookups each)
# at k = 4 and k = 1, so the difference in peak memory is what accumulation
# keeps between micro-batches.
_SPARSE = dict(model="bench_sparse_embedding", warmup=3, steps=30)
SPARSE_MICRO, SPARSE_K = 256, 4


def _startup(k):
  """A startup variant, k micro-batches per update.

  Only the batch per update and accumulation_steps depend on k, so the
  k=64 and k=1 runs differ in nothing else.
  """
  return ("python", 1, dict(kind="startup", model="resnet20",
                            batch=STARTUP_MICRO * k, accumulation_steps=k,
                            steps=STARTUP_UPDATES))


# name -> (launcher: python | horovodrun | launch, processes, worker.py
# flags); runner.command turns one into a command line.
VARIANTS = {
    "digits_ours": ("python", 1, dict(_DIGITS, kind="ours")),
    "digits_hand": ("python", 1, dict(_DIGITS, kind="hand")),
    "pipeline_ours": ("python", 1, dict(_PIPE, kind="pipeline_ours")),
    "pipeline_plain": ("python", 1, dict(_PIPE, kind="pipeline_plain")),
    "resnet_ours": ("python", 1, dict(_RESNET, kind="ours")),
    "resnet_hand": ("python", 1, dict(_RESNET, kind="hand")),
    "accum_ours": ("python", 1, dict(_ACCUM, kind="ours")),
    "accum_cond_apply": ("python", 1, dict(_MICRO_RUNS, kind="cond_apply")),
    "plain_micro": ("python", 1, dict(_MICRO_RUNS, kind="hand",
                                      accumulation_steps=1)),
    "adascale": ("python", 1, dict(_ACCUM, kind="ours", lr_scaling="adascale")),
    "resnet_bf16": ("python", 1, dict(_RESNET, kind="ours",
                                      precision="mixed_bfloat16")),
    "accum_ours_hvd1": ("horovodrun", 1, dict(_ACCUM_LONG, kind="ours",
                                             distribution="horovod")),
    "accum_horovod_bpps": ("horovodrun", 1, dict(_MICRO_RUNS_LONG,
                                                 kind="horovod_script")),
    "single_pinned": ("python", 1, dict(_WEAK, kind="ours")),
    "single_pinned_b64": ("python", 1, dict(_STRONG_SINGLE, kind="ours")),
    "hvd2_ours": ("horovodrun", 2, dict(_WEAK, kind="ours",
                                        distribution="horovod")),
    "hvd2_fp16": ("horovodrun", 2, dict(_WEAK_SHORT, kind="ours",
                                        distribution="horovod",
                                        allreduce_compression="fp16")),
    "hvd2_script": ("horovodrun", 2, dict(_WEAK_SHORT,
                                          kind="horovod_script")),
    "mwms2_ours": ("launch", 2, dict(_WEAK, kind="ours",
                                     distribution="multi_worker_mirrored")),
    "digits_single_pinned": ("python", 1, dict(_WEAK_DIGITS, kind="ours")),
    "digits_hvd2": ("horovodrun", 2, dict(_WEAK_DIGITS, kind="ours",
                                          distribution="horovod")),
    "digits_mwms2": ("launch", 2, dict(
        _WEAK_DIGITS, kind="ours", distribution="multi_worker_mirrored")),
    "startup_k64": _startup(STARTUP_K),
    "startup_k1": _startup(1),
    "startup_k2": _startup(2),
    "sparse_k4": ("python", 1, dict(_SPARSE, kind="ours",
                                    batch=SPARSE_K * SPARSE_MICRO,
                                    accumulation_steps=SPARSE_K)),
    "sparse_k1": ("python", 1, dict(_SPARSE, kind="ours",
                                    batch=SPARSE_MICRO)),
}
# Seconds before a measurement is stopped and recorded as failed, where not
# runner.DEFAULT_TIMEOUT_S. A startup run far past its usual length has
# regressed (a graph that grows with k), and the limit keeps it from eating
# the round's share of the budget: it is reported as failed instead.
TIMEOUT_S = {"startup_k64": 60, "startup_k1": 60, "startup_k2": 60}

# Variants alternate inside a group; groups run one after another per round.
GROUPS = [
    ["digits_ours", "digits_hand", "pipeline_ours", "pipeline_plain"],
    ["resnet_ours", "resnet_hand", "resnet_bf16"],
    ["accum_ours", "accum_cond_apply", "plain_micro", "adascale",
     "accum_ours_hvd1", "accum_horovod_bpps"],
    ["single_pinned", "hvd2_ours", "mwms2_ours", "hvd2_script", "hvd2_fp16",
     "single_pinned_b64"],
    ["digits_single_pinned", "digits_hvd2", "digits_mwms2"],
    ["startup_k64", "startup_k1", "startup_k2"],
    ["sparse_k4", "sparse_k1"],
]

EPS = "examples/sec"
MIB = "MiB peak RSS per process (lower is better)"
WINDOW_MIB = ("MiB peak RSS per process over the timed updates (lower is "
              "better)")
SECONDS = "seconds, whole process (lower is better)"
SESSION = "seconds from process start to a ready session (lower is better)"
UPDATE_EPS = "examples/sec over the updates after the first"
# The measurement field and the table's short unit for each metric.
FIELD = {EPS: "examples_per_sec", MIB: "peak_rss_mib", SECONDS: "seconds",
         SESSION: "session_seconds", UPDATE_EPS: "update_examples_per_sec",
         WINDOW_MIB: "window_peak_rss_mib"}
SHORT_UNIT = {EPS: "ex/s", MIB: "MiB", SECONDS: "s", SESSION: "s",
              UPDATE_EPS: "ex/s", WINDOW_MIB: "MiB"}
# A row's direction: its ratio must reach the target (higher is better) or
# stay within it (lower is better).
AT_LEAST, AT_MOST = ">=", "<="
RowSpec = collections.namedtuple(
    "RowSpec", "id description ours peer metric target direction",
    defaults=(AT_LEAST,))
_STARTUP = (f"accumulation k={STARTUP_K} / k=1, resnet20 micro-batch "
            f"{STARTUP_MICRO}, fresh process")
_STARTUP_RUN = f"(graph build, first update, {STARTUP_UPDATES - 1} more)"
# Each row gives RowSpec's fields in order; direction defaults to AT_LEAST.
ROWS = [
    ("1a", "overhead, digits_cnn: factory model_fn / hand-written model_fn",
     "digits_ours", "digits_hand", EPS, 0.97),
    ("1b", "overhead, resnet20: factory model_fn / hand-written model_fn",
     "resnet_ours", "resnet_hand", EPS, 0.97),
    ("2a", "accumulation k=4: ours / Horovod backward_passes_per_step=4, "
     "1 rank", "accum_ours_hvd1", "accum_horovod_bpps", EPS, 1.0),
    ("2b", "accumulation k=4: ours / conditional-apply accumulator",
     "accum_ours", "accum_cond_apply", EPS, 1.0),
    ("2c", "accumulation k=4: ours / plain training at the micro-batch (32)",
     "accum_ours", "plain_micro", EPS, 1.0),
    ("3", "AdaScale / plain momentum SGD, S=4, k=4", "adascale", "accum_ours",
     EPS, 0.95),
    ("4a", "weak scaling, resnet20, 32 per replica: 2 Horovod ranks / 1 "
     "process, 1 thread each (ideal 2.0)", "hvd2_ours", "single_pinned", EPS,
     1.8),
    ("4b", "weak scaling, resnet20, 32 per replica: 2 multi_worker_mirrored "
     "workers / 1 process, 1 thread each (ideal 2.0)", "mwms2_ours",
     "single_pinned", EPS, 1.8),
    ("4c", "2 Horovod ranks: ours / hand-written Horovod Estimator script",
     "hvd2_ours", "hvd2_script", EPS, 0.97),
    ("4d", "weak scaling, resnet20: 2 Horovod ranks / 2 multi_worker_mirrored "
     "workers", "hvd2_ours", "mwms2_ours", EPS, 0.95),
    ("4e", "weak scaling, digits_cnn, 256 per replica: 2 Horovod ranks / 1 "
     "process, 1 thread each (ideal 2.0)", "digits_hvd2",
     "digits_single_pinned", EPS, None),
    ("4f", "weak scaling, digits_cnn, 256 per replica: 2 multi_worker_mirrored "
     "workers / 1 process, 1 thread each (ideal 2.0)", "digits_mwms2",
     "digits_single_pinned", EPS, None),
    ("4g", "strong scaling, resnet20, global batch 64: 2 Horovod ranks of 32 / "
     "1 process of 64, 1 thread each (ideal 2.0)", "hvd2_ours",
     "single_pinned_b64", EPS, None),
    ("4h", "allreduce compression, 2 Horovod ranks, resnet20: fp16 / none",
     "hvd2_fp16", "hvd2_ours", EPS, None),
    ("5a", "input: TFRecord input_fn alone / what digits_cnn consumes",
     "pipeline_ours", "digits_ours", EPS, 5.0),
    ("5b", "input: TFRecord input_fn / plain best-practice tf.data pipeline",
     "pipeline_ours", "pipeline_plain", EPS, 0.95),
    ("6a", f"{_STARTUP} {_STARTUP_RUN}: wall time, whole process",
     "startup_k64", "startup_k1", SECONDS, 1.5, AT_MOST),
    ("6b", f"{_STARTUP} {_STARTUP_RUN}: peak RSS", "startup_k64",
     "startup_k1", MIB, 1.2, AT_MOST),
    ("6c", f"accumulation k={STARTUP_K} / k=2, resnet20 micro-batch "
     f"{STARTUP_MICRO}, fresh process: time to a ready session (graph "
     "built, session created, no update yet)", "startup_k64", "startup_k2",
     SESSION, 1.1, AT_MOST),
    ("6d", f"{_STARTUP}: examples/sec over updates 2-{STARTUP_UPDATES} "
     "(the compute inside 6a)", "startup_k64", "startup_k1", UPDATE_EPS,
     None),
    ("7", "precision, resnet20, 1 process: mixed_bfloat16 / float32",
     "resnet_bf16", "resnet_ours", EPS, None),
]
# Peak memory per process for the overhead, scaling and precision rows, same
# pairs (lower is better).
ROWS += [("M" + r[0], "memory, " + r[1].replace(" (ideal 2.0)", ""), r[2],
          r[3], MIB, None)
         for r in ROWS if r[0] in ("1a", "1b", "4a", "4b", "4c", "7")]
ROWS.append(
    ("8", f"accumulation k={SPARSE_K} / k=1, 1M x 32 embedding, micro-batch "
     f"{SPARSE_MICRO}: peak RSS while training", "sparse_k4", "sparse_k1",
     WINDOW_MIB, 1.2, AT_MOST))
