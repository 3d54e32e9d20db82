"""`python -m tools.rig.chaos`: see the package's docstring."""
from tools.rig.chaos import main

main()
