"""The prose of docs/PERFORMANCE.md: why a row can miss, method, probes.

These texts are the page's, rendered as they stand, so they are where the
page's figures from earlier analyses live (render.py adds the figures of
the run it renders). Code elsewhere in the bench carries none.
"""
from tools.bench import variants

_K, _MICRO = variants.STARTUP_K, variants.STARTUP_MICRO
_UPDATES = variants.STARTUP_UPDATES

# Why a row can miss its target and what would fix it, from the analysis
# done while writing the suite; the closing note quotes every missed row's.
_OVERHEAD = (
    "both sides run the same network, optimizer and input_fn; the factory "
    "adds a variable scope, the micro-batch split and, per session run, no "
    "fetch (LastStepHook reads the step once, at the end; that fix moved "
    "digits_cnn from 0.94 to 0.99 in an earlier run). What is left is within "
    "the round-to-round spread of this shared 2-core host: compare the "
    "per-round ratios. Fix if it persists: profile both graphs' step time "
    "with tf.profiler in one process.")

# Row 6a's reason in words; render.py adds the floor that the run's own
# rates (row 6d) put under the ratio.
STARTUP_COMPUTE = (
    f"k={_K} computes {_K}x the examples of k=1 ({_UPDATES} updates of "
    f"{_K * _MICRO} examples against {_UPDATES} of {_MICRO}), work that no "
    "accumulation design removes; 6a's ratio is bounded below by that "
    "compute, while 6b and 6c (memory, and the time to a ready session, "
    "where building the network k times showed) leave it out.")


_HOROVOD_GAP = (
    "two 1-thread processes side by side reach about 1.86-1.9x one process "
    "on this host, and multi_worker_mirrored comes close to that (row 4b); "
    "Horovod pays per update what MWMS does not: its background thread "
    "wakes every HOROVOD_CYCLE_TIME (5 ms) for a Gloo round trip with the "
    "other rank, an update's allreduce waits for the next wake, then goes "
    "over TCP, all on the rank's own busy core. MWMS's collective runs "
    "inside the step and polls nothing. Tried (section Horovod knobs and "
    "its probes): binding ranks to cores (now the default) bought most; "
    "other cycle times, the background thread's own affinity, per-tensor "
    "allreduce overlapping backprop and binding only the compute threads "
    "bought nothing or lost. What is left is Horovod 0.28.1's polling "
    "loop, which has no event-driven mode; a host with a core to spare for "
    "communication, or accumulation_steps > 1 (one exchange per k "
    "micro-batches), removes most of it.")


EXPLANATIONS = {
    "1a": _OVERHEAD, "1b": _OVERHEAD,
    "3": (
        "AdaScale adds a squared norm per variable and micro-batch, the norm "
        "of the mean gradient, a non-finite guard per gradient and its state "
        "updates to every update; the state assigns already run beside the "
        "apply, which waits only for the learning rate. A miss beyond the "
        "round-to-round spread would be that tail; fix candidate: one fused "
        "norm over the concatenated gradients per micro-batch."),
    "4a": _HOROVOD_GAP, "4d": _HOROVOD_GAP,
    "4b": (
        "two independent 1-thread resnet20 processes side by side reach "
        "about 1.86-1.9x one process here (they share caches and memory "
        "bandwidth, and the lone process's input pipeline had the idle "
        "second core to itself): that is the ceiling on this host, and a "
        "round that misses 1.8 by a few hundredths is within the spread of "
        "the per-round ratios. Fix: none in the framework; compare on a host "
        "with a core to spare."),
    "4c": (
        "both sides make one allreduce per update (ours folds the stop flag "
        "into the gradients' group; the script allreduces per tensor, which "
        "Horovod fuses), and ours binds each rank to its share of the cores "
        "by default while the script, as users write it, does not. A miss "
        "would be the per-update work ours adds (the stop flag's feed); fix "
        "candidate: profile one step of each with the Horovod timeline."),
    "5b": (
        "from_tfrecords interleaves its files with deterministic=True by "
        "default, so a seed reproduces the data order; the plain pipeline "
        "lets tf.data return records out of order (in an earlier run: ours "
        "151k, plain 160k, plain with deterministic=True 146k ex/s). Users "
        "who do not need a reproducible order pass deterministic=False."),
    "6a": STARTUP_COMPUTE,
}

GPU_ROWS = (
    "Not measured yet: resnet20 in float32 and mixed_float16, on 1 process "
    "and `mirrored`, needs TensorFlow 2.15 on a GPU host, and the one GPU "
    "machine lent so far (2026-11-22: an NVIDIA H100 80GB HBM3, driver "
    "580.159.04, CUDA 13.0) could not run it. It has Python 3.12 and no "
    "TensorFlow; TF 2.15 publishes no Python 3.12 wheels (pip there: \"No "
    "matching distribution found for tensorflow==2.15.1\"), nothing can be "
    "installed there from a registry, and the wheel (about half a GiB) with "
    "the CUDA 12.2 and cuDNN 8.9 libraries it was built against is far over "
    "the 64 MiB a run may carry. So the GPU paths (one GPU per Horovod rank "
    "through `visible_device_list`, `mirrored` over the GPUs, mixed_float16 "
    "with loss scaling) have not run on a GPU; CI has none, and every CPU "
    "test runs without one. The session that measured this page's scaling "
    "rows was lent no GPU machine at all.")

METHOD = [
    "Timing: a hook starts the clock after the warm-up runs and stops it "
    "after the timed runs; graph building, session creation, variable "
    "broadcast and warm-up are excluded for every variant alike. Every "
    "Estimator gets max_steps, as users pass it; no checkpoint, summary or "
    "step log is written inside the timed window.",
    "Accumulation peers read one micro-batch (32) per session run and are "
    "timed over 4x the runs, so every side of rows 2-3 trains on the same "
    "examples; ours reads the 4 micro-batches of an update in one run.",
    "Thread pinning (row 4): every process of both sides gets one intra-op "
    "thread, sized by the framework's backends.base.pin_threads before "
    "TensorFlow's eager context starts, and TF_NUM_INTEROP_THREADS=1; ours "
    "also passes intra_op_threads=1. A session config alone does not pin on "
    "TF 2.15: Estimator.train starts the eager context, and with it the "
    "process-wide CPU thread pool at full size, before any session config "
    "is read (measured: 1.66 cores busy with intra/inter = 1 in the session "
    "config, 1.00 with the environment variables); build_run_config sizes "
    "the pool before the context starts. Our Horovod ranks are bound to one "
    "core each, the framework's default for Horovod (backends/horovod/"
    "binding.py bind_to_cores); the single process, the MWMS workers and "
    "the hand-written Horovod script run unbound, as users run them.",
    "Rows 4a, 4b, 4d-4f: weak scaling keeps each replica's batch (resnet20 "
    "32, digits_cnn 256), so 2 processes do twice the examples per update; "
    "row 4g, strong scaling, keeps the global batch (64) and splits it. "
    "Every window of these rows' measurements is at least 20 s (column "
    "shortest window).",
    "Row 7: resnet20 on all cores, mixed_bfloat16 (bfloat16 compute, "
    "float32 variables and optimizer) against float32; the CPU's flags "
    "decide whether bfloat16 is faster (this host's report avx512_bf16).",
    "Memory is each process's peak RSS (getrusage ru_maxrss); for "
    "multi-process variants the largest process's.",
    "Rows 6a-6d: a fresh process (tools/bench/worker.py "
    "--kind=startup_child) "
    "trains resnet20 from a new model_dir through the public API only, "
    "`es.make_estimator(model, model_dir=new, "
    "training_config=es.TrainingConfig(accumulation_steps=k))` then "
    "`estimator.train(estimator.model_input_fn(TRAIN, 8 * k), "
    f"max_steps={_UPDATES})`, all else at its defaults and no "
    f"evaluation; k={_K} against k=1, nothing else differs. It runs "
    "as the only child of a wrapper (--kind=startup), which reads the clock "
    "right before starting it and whose RUSAGE_CHILDREN is then that "
    "process's own usage. 6a: start to exit. 6b: the child's peak RSS. 6c: "
    "start to the child's SessionRunHook.after_create_session (interpreter "
    "and TensorFlow start, graph build, session creation, variable "
    "initialization, checkpoint 0; no update yet), the part that grew with "
    "k while the network was built once per micro-batch; it compares "
    "k=64 with k=2, since k=1 builds no accumulation loop at all (the "
    "loop's fixed cost, the same for every k > 1, is in 6a). 6d: "
    "examples/sec "
    "from the end of update 1 to the end of the last. 6a also holds the "
    f"compute of {_UPDATES} updates, {_K}x the examples at "
    f"k={_K}, which no accumulation design removes; 6c leaves it "
    f"out. A run past {variants.TIMEOUT_S['startup_k64']} s is stopped and "
    "counted "
    "as failed.",
    "The host is shared with other jobs; cores/process shows how much CPU "
    "each process really got, and the load average is under Machine.",
]


# Probes of knobs whose code was not kept, listed under the knobs table:
# each ran once beside tools/horovod_knobs.py, with its setup and 2
# interleaved rounds (ratio to 1 process per round). The first two bound
# ranks with `taskset -c $HOROVOD_LOCAL_RANK`, before the framework bound
# them itself.
HOROVOD_PROBES = [
    "bound with taskset, HOROVOD_CYCLE_TIME=5: 1.73, 1.71; =2: 1.68, 1.72; "
    "=10: 1.62, 1.72; =20: 1.59, 1.68 (multi_worker_mirrored in the same "
    "rounds: 1.86, 1.92)",
    "bound with taskset, plus HOROVOD_THREAD_AFFINITY=0,1 for the "
    "background threads: 1.71 (1 round; 1.73 without)",
    "the framework's binding: 1.74, 1.69; unbound: 1.59, 1.63; binding only "
    "the threads made after hvd.init (TensorFlow's, not Horovod's "
    "background and Gloo threads): 1.64, 1.69 (multi_worker_mirrored: "
    "1.81, 1.77)",
    "bound, one allreduce per gradient instead of the grouped one, so the "
    "exchange of the last layers' gradients overlaps the rest of the "
    "backward pass: 1.59, 1.60",
    "the framework's binding with HOROVOD_CYCLE_TIME=0.5: 1.65, 1.60; "
    "=2.5: 1.68, 1.63; with HOROVOD_STALL_CHECK_DISABLE=1: 1.68, 1.68 "
    "(framework defaults in the same rounds: 1.72, 1.69)",
    "what folding is worth, from the table above (2026-11-22): without "
    "fusion each of resnet20's 65 gradient tensors is its own allreduce, and "
    "an update of 2 x 32 examples took 336 ms instead of 102 ms, about 3.6 "
    "ms per extra allreduce. The SIGTERM flag and AdaScale's sums, as "
    "separate allreduces, would each add about that (3.5 % of an update); "
    "folded, they are a few bytes more in the gradients' one fused buffer",
]

# docs/PERFORMANCE.md's pointer to the rows over shaped links.
NETWORK = (
    "Every row above crosses the loopback, where resnet20's 1.1 MB of "
    "gradients take about a millisecond. [docs/NETWORK.md](NETWORK.md) "
    "(`make bench-network`) has the same weak-scaling comparison between 2 "
    "hosts over links shaped to 1 Gbit/s and 100 Mbit/s, with fp16 "
    "compression and accumulation, a plot of efficiency against bandwidth "
    "([docs/network_scaling.png](network_scaling.png)), allreduce-only runs"
    " on 2-4 hosts and tools/scaling_model.py's predictions for 8-128 "
    "hosts. What such a link stands for:")
