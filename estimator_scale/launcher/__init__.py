"""estimator-scale-launch: TF_CONFIG clusters here or on hosts over ssh.

TensorFlow-free, as it only starts other processes: hosts.py places the
tasks, remote.py runs them over ssh, job.py starts them and watches the job
(one loop for plain and elastic launches), elastic.py decides restarts and
__main__.py is the command line.
"""
