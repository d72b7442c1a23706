"""The output folder of a multi-machine partitioning, gathered and renamed into place
once every rank has written its partitions.

Every rank writes into a hidden temporary folder beside ``--out``. When the ranks are
done, the lowest rank that can see another rank's folder (the same file system)
moves that rank's partitions into its own folder, writes ``META.json`` and renames
the folder to ``--out`` (see :mod:`pyg_dist.partition.distributed.partitioner`).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Optional

from pyg_dist.format import files, io
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.hooks import kill_if_requested, partition_unshared
from pyg_dist.partition.distributed.comm import ArrayComm


def finish_output(comm: ArrayComm, tmp: Path, meta: PartitionMeta, root: Path) -> None:
    """Gathers the partitions of ranks sharing a file system into one folder per file
    system, writes META there and renames it to ``root`` (collective).

    Args:
        comm (ArrayComm): the ranks.
        tmp (Path): this rank's temporary folder, holding the partitions it wrote.
        meta (PartitionMeta): the partitioning's META.
        root (Path): the output folder.
    """
    token = comm.allgather(uuid.uuid4().hex if comm.rank == 0 else None,
                           "finishing the output")[0]
    marker = tmp / f".rank-{comm.rank}-{token}"
    marker.touch()
    folders = comm.allgather(str(tmp), "finishing the output")
    seen = [r for r, f in enumerate(folders) if (Path(f) / f".rank-{r}-{token}").exists()]
    if partition_unshared():  # test hook: as if
        seen = [comm.rank]  # every rank ran on a machine of its own
    leaders = comm.allgather(min(seen), "finishing the output")
    error: Optional[BaseException] = None
    try:
        if leaders[comm.rank] == comm.rank:
            for r, leader in enumerate(leaders):
                if leader == comm.rank and r != comm.rank:
                    for part in Path(folders[r]).glob("part_*"):
                        os.replace(part, tmp / part.name)
            for stale in tmp.glob(".rank-*"):
                stale.unlink()
            io.save_json(meta.to_json(), tmp / io.META_FILE)
    except OSError as exc:
        error = exc
    comm.check("gathering the partitions", error)
    kill_if_requested("rename", comm.rank)
    if leaders[comm.rank] == comm.rank:
        files.swap_in(tmp, root)
    comm.check("renaming the output folder", None)
