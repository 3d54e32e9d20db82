"""Input: what a job trains and evaluates on, as Estimator input_fns.

The modules read one way, each importing only those above it:

  position.py     where a training input stands at a checkpoint, so a
                  resumed or resized job trains each example of the epoch
                  once; the order of the examples as a function of it
  file_shards.py  the same for workers that read whole files of their own
  input_fn.py     InputFn: the callable Estimator takes, the job it reads
                  for, and what the builders share
  readers.py      the builders: arrays, TFRecord, CSV, synthetic data
  data_files.py   a model's data from the user's TFRecord or CSV files, by
                  its feature spec
  days.py         dated partitions (day=YYYY-MM-DD/): which days there are,
                  waiting for one to land, a day's span of updates

`es.inputs` is this package: its builders below, and `days`, are the
public API.
"""
from estimator_scale.inputs.input_fn import InputFn
from estimator_scale.inputs.readers import from_arrays
from estimator_scale.inputs.readers import from_csv
from estimator_scale.inputs.readers import from_csv_lines
from estimator_scale.inputs.readers import from_tfrecords
from estimator_scale.inputs.readers import synthetic
from estimator_scale.inputs.readers import write_tfrecord_shards
from estimator_scale.inputs.data_files import from_files
from estimator_scale.inputs.data_files import write_csv
from estimator_scale.inputs import days
