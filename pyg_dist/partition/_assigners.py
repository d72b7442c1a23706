"""The assigners, registered by name: the one place that maps a ``method`` to code.

Every assigner takes an :class:`~pyg_dist.partition._assign.AssignInput` (the graph as
counts, train masks and a symmetric CSR built on demand, in memory or in scratch
files), the number of partitions and :class:`~pyg_dist.partition._assign.AssignOptions`,
and returns an :class:`~pyg_dist.partition._assign.Assignment`. KaMinPar's package is
optional: its module imports it only when it runs.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from pyg_dist.partition._assign import (AssignInput, Assignment, AssignOptions, metis_assign,
                                       random_assign)
from pyg_dist.partition._given import given_assign
from pyg_dist.partition._kaminpar_assign import kaminpar_assign

Assigner = Callable[[AssignInput, int, AssignOptions], Assignment]

#: method name -> assigner (``METHODS`` lists the names in this order)
ASSIGNERS: Dict[str, Assigner] = {
    "metis": metis_assign,  # coarsen=True: METIS on the label-propagation clusters
    "kaminpar": kaminpar_assign,
    "random": random_assign,
    "given": given_assign,
}
METHODS = tuple(ASSIGNERS)


def run_assigner(graph: AssignInput, num_parts: int, options: AssignOptions) -> Assignment:
    """The partition of every node by ``options.method`` (one partition: all zeros).

    Raises:
        ValueError: for an unknown method.
    """
    if options.method not in ASSIGNERS:
        raise ValueError(f"unknown partition method '{options.method}' (choose from "
                         f"{METHODS})")
    if num_parts == 1 and options.method != "given":
        return Assignment({t: np.zeros(n, dtype=np.int64) for t, n in graph.num_nodes.items()})
    return ASSIGNERS[options.method](graph, num_parts, options)
