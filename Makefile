# Every target runs from a fresh clone: `make setup` is cheap once it has run.
PY := .venv/bin/python
NP ?= 2

.PHONY: setup run test test-unit test-multiprocess bench bench-network study bazel-test clean

setup:
	bash tools/setup_env.sh
	bash tools/setup_rig.sh

# The main job: 2 Horovod ranks on this host train and evaluate digits_cnn.
run: setup
	rm -rf /tmp/estimator_scale_run
	TF_CPP_MIN_LOG_LEVEL=1 .venv/bin/horovodrun --gloo -np $(NP) -H localhost:$(NP) \
	  $(PY) -m estimator_scale.train --distribution=horovod --model=digits_cnn \
	  --model_dir=/tmp/estimator_scale_run \
	  --summary_json=/tmp/estimator_scale_run/summary.json \
	  --export_dir=/tmp/estimator_scale_run/export
	cat /tmp/estimator_scale_run/summary.json

test: setup
	$(PY) -m pytest -q --durations=25 tests

test-unit: setup
	$(PY) -m pytest -q tests -m "not multiprocess"

test-multiprocess: setup
	$(PY) -m pytest -q tests -m multiprocess

bench: setup
	$(PY) -m tools.bench --out bench.json --markdown docs/PERFORMANCE.md

# Scaling over shaped links between the rig's hosts (needs root; about 80
# minutes): docs/NETWORK.md, docs/network_scaling.png and their JSON.
bench-network: setup
	$(PY) -m tools.bench.network allreduce
	$(PY) -m tools.bench.network rows

study: setup
	$(PY) tools/adascale_study.py --out_dir docs/adascale

bazel-test: setup
	bash tools/bazel_test.sh

clean:
	rm -rf .venv bazel-* /tmp/estimator_scale_run
