"""The `estimator-scale` command line (`python -m estimator_scale.cli`):
flags.py defines every flag, __main__.py parses them and runs a command
(train.py, checkpoints.py), which makes its Estimator with estimators.py."""
