"""`estimator-scale-launch` from a checkout: python tools/launch.py --workers 2 -- CMD.

Runs estimator_scale/launch.py as a script, not through the package, whose
import would load TensorFlow into a process that only starts others.
"""
import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            os.pardir, "estimator_scale", "launch.py"),
               run_name="__main__")
