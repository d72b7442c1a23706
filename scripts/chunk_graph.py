#!/usr/bin/env python
"""Write a graph in the chunked graph format for pyg_dist. See ``--help``."""
import sys

from pyg_dist.cli.chunk import main

if __name__ == "__main__":
    sys.exit(main())
