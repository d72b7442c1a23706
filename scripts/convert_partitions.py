#!/usr/bin/env python
"""Convert a torch_geometric.distributed partition folder for pyg_dist. See ``--help``."""
import sys

from pyg_dist.cli.convert import main

if __name__ == "__main__":
    sys.exit(main())
