"""The network bench (`make bench-network`): scaling over shaped links.

  python -m tools.bench.network allreduce|rows|render

allreduce.py  allreduce-only runs on 2-4 hosts (allreduce_worker.py,
              collective_worker.py)
analysis.py   what they measure: the calibration and the model's check
rows.py       training rows on 2 hosts at each link rate
links.py      the rig's hosts and their shaping
scaling_model.py  time per update on N hosts, and its command line
render.py     results/*.json -> docs/NETWORK.md through NETWORK.md.template,
              link.md and reading.md, whose figures figures.py and
              reading.py compute from the JSON
plot.py       results/rows.json -> docs/network_scaling.png
"""
