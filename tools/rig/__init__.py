"""The rig: hosts made on this machine (cluster.py) and the scripts that
set this machine up for them."""
