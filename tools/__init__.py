"""The lab around the framework: benchmarks, the AdaScale study, the rig.

Everything here runs from the checkout's root as `python -m tools....`;
tools/repo.py holds what they share (the root, results IO, templates).
"""
