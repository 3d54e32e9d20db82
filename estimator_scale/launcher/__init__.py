"""estimator-scale-launch: TF_CONFIG clusters here or on hosts over ssh.

TensorFlow-free, as it only starts other processes.
"""
