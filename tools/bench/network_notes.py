"""The prose of docs/NETWORK.md: what the rows stand for, the rule, method.

As notes.py for docs/PERFORMANCE.md: these texts are the page's, so the
figures of earlier analyses that they quote live here; network_render.py
adds the figures of the results it renders.
"""
# A GPU computes a resnet20 update this many times faster than one core of
# the bench's host; WHAT_A_LINK_STANDS_FOR gives the figures behind it.
GPU_SPEEDUP = 30
# About how long `make bench-network` takes on the 2-core host.
FULL_RUN_MINUTES = 57

INTRO = (
    "Written by `make bench-network` (`tools/bench/network.py`) from "
    "docs/network.json and docs/network_allreduce.json; `python -m "
    "tools.bench.network render` rewrites this page and the plot from them. "
    "Hosts are the rig's (tools/cluster.py): network namespaces on one "
    "2-core machine, each with its own hostname, sshd and a veth cable to a "
    "bridge, whose rate `tc ... tbf` limits each way. Weak scaling: each of "
    "2 hosts runs one rank of 32 examples per micro-batch, against 1 "
    "process of 32 on a rig host; one intra- and one inter-op thread per "
    "process, so a host is one core. Efficiency is the 2-host job's "
    "examples/sec over twice the 1 process's, the median over rounds of the "
    "ratio taken within a round (`per round`, in round order). `model` is "
    "tools/scaling_model.py's efficiency for the row from the compute a "
    "rank has inside a 2-host job (measured in one: see Method) and the "
    "allreduce runs' calibration; `model, lone compute` puts the lone "
    "process's compute in its place, as a cluster whose hosts have a core "
    "to spare for the job's threads would have it.")

WHAT_A_LINK_STANDS_FOR = (
    "This host's single core computes a resnet20 update of 32 examples in "
    "about 85 ms (docs/PERFORMANCE.md row 4a: 376 examples/sec, 1 thread). "
    "A current GPU does the same update in about 3 ms: at 32 examples the "
    "update is too small to fill the GPU, and its time is the per-kernel "
    "cost of the ops it runs (resnet20's update executes 747 TensorFlow ops"
    " in graph mode, counted with RunMetadata's step stats, each a kernel "
    "launch of a few microseconds on a GPU: 3 ms at 4 µs each), not its "
    "FLOPs (about 0.25 GFLOP per example forward and backward, 8 GFLOP per "
    "update: 2.4 ms at 5 % of an H100's 67 FP32 TFLOP/s). Hence the factor "
    f"of about {GPU_SPEEDUP}. It is resnet20's: the wide MLP's update is 68 "
    "ops of large matrix products, which a GPU runs far more than 30x "
    "faster than one core, so its predictions in docs/NETWORK.md are "
    "optimistic. The exchange costs the same bytes on both, so what sets "
    "the efficiency is bytes over bandwidth against compute: a link "
    f"{GPU_SPEEDUP}x slower than a GPU cluster's loads the network here as "
    "that cluster's is loaded. 100 Mbit/s here stands for 3 Gbit/s between "
    "GPU hosts, 1 Gbit/s for 30 Gbit/s; the unshaped veth (a few hundred "
    "MB/s to an allreduce here, bound by the CPU) for a fast link. What "
    "does not scale: the latency per ring step and Horovod's overhead per "
    "exchange are this busy 2-core machine's (docs/NETWORK.md's "
    "calibration: hundreds of microseconds and about a millisecond, where a"
    " real cluster has tens of microseconds), and Horovod's cycle wait "
    "(half of HOROVOD_CYCLE_TIME, 2.5 ms at the framework's 5 ms) is a "
    "fixed time, small against an 85 ms update and as large as the whole "
    "update on a GPU; the predictions in docs/NETWORK.md count them at a "
    "cluster's size. No GPU was lent to measure the 3 ms "
    "(docs/PERFORMANCE.md, GPU rows): it is the estimate above, not a "
    "measurement.")

RULE = (
    "Let r be one exchange's time over one micro-batch's compute, r = "
    "(2(N-1)/N x gradient bytes / link bandwidth + fixed costs) / compute, "
    "which tools/scaling_model.py computes (`--compute_ms`, `--megabytes`). "
    "Efficiency is 1 / (1 + r) plain, 1 / (1 + r/k) with accumulation k, "
    "and about 1 / (1 + r/2) with fp16 compression once the data term "
    "dominates. Turn fp16 compression on from r of about 0.1 where the "
    "link is slower than the host casts: the casts and the float16 sum "
    "cost c per gradient byte and save (N-1)/N bytes of wire per byte, so "
    "fp16 pays below a bandwidth of (N-1)/(N c), 270 MB/s on 2 hosts and "
    "540 MB/s on many at this CPU's 1.84 ns (one core; a GPU casts at "
    "memory speed, where only r matters). Turn accumulation on from r of "
    "about 0.25, with k of about 9 r for 90 % efficiency (k multiplies the "
    "batch: pair it with `--lr_scaling=adascale`); both together divide r "
    "by about 2k. On hosts whose cores all compute (CPU training, one rank "
    "per core), leave a core to the job's threads or count on Horovod's "
    "background thread taking 4-6 % of one at the framework's 5 ms cycle.")

PREDICTIONS = (
    f"tools/scaling_model.py with a GPU's compute (this host's 1-process "
    f"compute / {GPU_SPEEDUP}, see above; a GPU host has cores to spare for "
    "the job's threads, so the lone process's compute, not a rig rank's), "
    "fp16's and the collective's CPU cost per byte likewise / "
    f"{GPU_SPEEDUP}, 25 µs per ring step (an assumed "
    "switch hop and kernel, not measured here), Horovod's cycle at the "
    "framework's 5 ms and the fixed costs per exchange as the allreduce "
    "runs measured them here (Horovod's and the collective's, about 3 ms "
    "each; a faster host has less), at 10 and 100 Gbit/s per host. "
    "Efficiency per variant; `collective` is multi_worker_mirrored's "
    "all-reduce (no cycle wait). What it means for k and S: the ring's "
    "latency term grows with N (2(N-1) steps) while its data term does not, and Horovod's cycle "
    "wait is fixed, so at many hosts a small model is latency-bound and "
    "only fewer exchanges help: accumulation k divides every term by k, "
    "compression only the data term. Choose k from the rule above at the "
    "target N; S = N x k then grows with both, and AdaScale keeps the "
    "progress per example as S grows, up to the point where its gain r "
    "falls well below S (the critical batch size, docs/ADASCALE.md), beyond "
    "which more hosts buy little whatever the network. A shorter "
    "HOROVOD_CYCLE_TIME (1 ms) is worth trying on GPU hosts, where the "
    "framework's 5 ms costs as much as a whole small update. A worked "
    "example from the model: resnet20 on 128 GPU hosts at 10 Gbit/s has r "
    "of about 6.5 (3.1 ms of compute against 2.5 ms of cycle wait, 2.8 ms "
    "of Horovod's overhead, 12.7 ms of latency over two rings of 254 steps "
    "and 1.8 ms of data), so 90 % would take k of about 58 and S of about "
    "7,400 (240,000 examples per update), far past its critical batch: "
    "there, take k from S (the largest S AdaScale still gains from, "
    "divided by N) and accept the efficiency that leaves, or use fewer "
    "hosts.")

READING = [
    "At 100 Mbit/s, fp16 compression and accumulation k=4 beat plain "
    "Horovod as the count of bytes says: resnet20 1.31x and 1.56x (0.561 "
    "and 0.669 against 0.429; the issue's back-of-envelope said 1.3x and "
    "1.5x), the 25 MB MLP 1.96x and 3.86x. multi_worker_mirrored equals "
    "Horovod once the link dominates (0.474 and 0.0105).",
    "fp16 compression loses where the link is faster than the CPU casts: "
    "the MLP's 25 MB on the unshaped veth ran at 0.49x plain Horovod, and "
    "at 1.34x at 1 Gbit/s. The allreduce runs put the casts and the float16"
    " sum at 1.84 ns per gradient byte on one core, so on N hosts fp16 "
    "pays below a bandwidth of (N-1)/N / 1.84 ns: 270 MB/s (2.2 Gbit/s) on "
    "2 hosts, 540 MB/s on many. In training it costs more than that on the "
    "unshaped link, where the link itself is the CPU's copying: the model "
    "over-predicts that one fp16 row by 1.50x, and is within 7 % of the "
    "others.",
    "A rank of a 2-host job computes slower than a lone process: resnet20 "
    "97 and 126 ms per micro-batch in rounds 1 and 2 against 87 and 97 ms "
    "alone. On the rig the two hosts are the machine's two cores, so the "
    "job's other threads take time from the ranks' compute: Horovod's "
    "background thread wakes every cycle even with nothing to send (with "
    "`hvd.init()` and nothing else, 4-6 % of a core at the framework's "
    "5 ms cycle, 15-19 % at 1 ms), and Gloo's and the launchers' threads "
    "add to it. With that compute the model holds every resnet20 row "
    "within 0.88-1.05 (with the lone compute it over-predicted them all, "
    "1.04-1.23, the gap the last run could not place); a real host with a "
    "core to spare has the lone compute, and the predictions below use it.",
    "The wide MLP's rows hold within 1.01-1.10 where the link is shaped, "
    "multi_worker_mirrored at 1 Gbit/s aside (1.16). "
    "Three unshaped rows miss by more: fp16 (1.50, above), k=4 (1.19) and "
    "multi_worker_mirrored (1.22). The in-job compute comes from a job at "
    "k=16, and on this model accumulation also saves per micro-batch what "
    "the optimizer's update of 25 MB of variables costs: alone, 23.0 ms at "
    "k=1 against 18.9 ms at k=16 (measured apart from the run), so the "
    "22 ms the job gives understates a k=1 rank's compute; a lone run at "
    "k=16 per round would separate the two.",
    "Per-round ratios agree within 10 % on 21 of the 24 rows; the three "
    "that do not are fp16's (resnet20 at 100 Mbit/s 12.8 %, at 1 Gbit/s "
    "10.0 %, the MLP at 1 Gbit/s 11.7 %), whose casts run at whatever speed"
    " this shared machine's core has that minute: round 2's baseline ran "
    "11 % slower than round 1's on resnet20 (the baselines before and after"
    " each model's variants bracket it).",
]

REPRODUCE = (
    "make bench-network   # allreduce runs, then rows; needs root\n"
    "python -m tools.bench.network allreduce --hosts 2,3,4 --rates "
    "1gbit,100mbit\n"
    "python -m tools.bench.network rows --rounds 2 --window_s 20\n"
    "python -m tools.bench.network render   # this page and the plot, from "
    "the JSON")

METHOD = [
    "Each measurement is a fresh process tree started from host1 of the "
    "rig: tools/bench/worker.py under horovodrun (`-H host1:1,host2:1`), "
    "estimator-scale-launch (`--hosts host1,host2`) or alone; timing as in "
    "docs/PERFORMANCE.md (a hook times the updates after the warm-up).",
    "A round: per model, the 1-process baseline, then each variant as one "
    "process tree that times a window per link rate (unshaped, 1 Gbit/s, "
    "100 Mbit/s): after a window the ranks pause, the bench reshapes the "
    "links, and 2 untimed updates precede the next window "
    "(tools/bench/windows.py). A 2-host tree takes longer to start than a "
    "window lasts, so this is what lets 2 rounds fit in about "
    f"{FULL_RUN_MINUTES} minutes. The baseline runs before and after the "
    "variants of its model, and the round's baseline, shared by the rates, "
    "is the two runs' mean: this virtual machine's speed drifts by several "
    "per cent over minutes. Steps are sized from the model's predicted "
    "update time so that each window lasts at least `--window_s` (20 s).",
    "A rank's compute inside a 2-host job: after the first baseline, a "
    "2-host Horovod job with 16 micro-batches per exchange on the unshaped "
    "link; its update time less the model's exchange, over 16. On the rig "
    "the two hosts share the machine's two cores with nothing to spare, so "
    "a rank's core also runs Horovod's background thread (idle, 4-6 % of a "
    "core at the framework's 5 ms cycle and 15-19 % at 1 ms, measured on "
    "two rig hosts with `hvd.init()` and nothing else) and the job's "
    "other threads, and its compute takes longer than a lone process's.",
    "Variants: Horovod (one grouped allreduce per update); Horovod with "
    "`allreduce_compression=fp16`; Horovod with `accumulation_steps=4` (4 "
    "micro-batches of 32 per update, one exchange); multi_worker_mirrored. "
    "All momentum SGD, float32, lr_scaling identity. Every variant's "
    "efficiency is against the same 1 process at k=1, so the k=4 rows "
    "count what accumulation saves on one process too (docs/PERFORMANCE.md "
    "row 2c).",
    "Shaping: tc's tbf on both ends of each host's cable (tools/cluster.py "
    "Host.shape), with a burst of 1 ms of traffic (64 KiB at least): "
    "cluster.py's default of 10 ms would let resnet20's whole 1.1 MB "
    "exchange through at 1 Gbit/s at line speed after each update's "
    "compute, which no real 1 Gbit/s link does.",
    "Allreduce-only runs (tools/bench/allreduce_worker.py): Horovod ranks "
    "allreduce buffers of a 4-byte probe and of each model's gradient size, "
    "each timed allreduce after an idle gap (20 ms: the token bucket "
    "refills, as compute lets it in training) and a sleep of a random "
    "fraction of Horovod's cycle (the same on every rank), so it meets the "
    "cycle at a random point as an update's does; the median per buffer. "
    "Each model's buffer is timed again with Horovod's fp16 compression "
    "(the casts and the float16 sum on the rank's one thread), which "
    "calibrates the model's cost per byte of compressing. "
    "multi_worker_mirrored workers (tools/bench/collective_worker.py, under "
    "estimator-scale-launch) all-reduce the same buffers through the "
    "strategy's own cross-device all-reduce, for the collective's fixed "
    "cost and cost per byte (rows ending in `collective`).",
]
