#!/usr/bin/env python
"""Partition a graph for pyg_dist. See ``--help`` or README.md."""
import sys

from pyg_dist.cli.partition import main

if __name__ == "__main__":
    sys.exit(main())
