"""Input: what a job trains and evaluates on, as Estimator input_fns.

Modules import only those before them: position, file_shards, input_fn,
readers, data_files, days.
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
