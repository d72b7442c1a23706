"""``python metis_job.py FOLDER PARTS SEED``: METIS on a
graph saved as ``xadj/adjncy/eweights/vweights.npy`` in FOLDER; writes ``parts.npy``.

Run as a child process by rank 0 (the same call as
:func:`pyg_dist.partition._assign._part_graph`, without importing torch) of a multi-machine partitioning: pymetis holds the
GIL for the whole call, which would stop the rank's heartbeat, and the child's memory
is given back the moment it ends.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(argv: list) -> int:
    import pymetis  # only: importing pyg_dist would load torch (seconds)

    folder, num_parts, seed = Path(argv[0]), int(argv[1]), int(argv[2])
    load = {n: np.load(folder / f"{n}.npy") for n in ("xadj", "adjncy", "eweights", "vweights")}
    options = pymetis.Options()
    options.seed = seed
    _, parts = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(load["xadj"], load["adjncy"]),
                                  vweights=load["vweights"].reshape(-1),
                                  eweights=load["eweights"], options=options)
    parts = np.asarray(parts, dtype=np.int64)
    tmp = folder / "parts.tmp.npy"
    np.save(tmp, parts)
    tmp.replace(folder / "parts.npy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
