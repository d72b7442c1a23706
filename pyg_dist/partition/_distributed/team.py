"""The ranks of a multi-machine partitioning as the pipeline's team
(:class:`~pyg_dist.partition._pipeline.Team`): which partitions a rank writes, values
gathered from every rank, the start every rank agrees on, and the output folder
gathered and renamed into place once every rank has written its partitions.

Every rank writes into a hidden temporary folder beside ``--out``. When the ranks are
done, the lowest rank that can see another rank's folder (the same file system)
moves that rank's partitions into its own folder, writes ``META.json`` and renames
the folder to ``--out`` (see :mod:`pyg_dist.partition._distributed.dist_partitioner`).
"""
from __future__ import annotations

import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, TypeVar

from pyg_dist.format import _files as files, _partition_io as io, _leftovers as leftovers, _renames as renames
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._distributed.comm import ArrayComm
from pyg_dist.rpc._agreement import DisagreementError, PeerFailedError

T = TypeVar("T")


def writer_of(part: int, num_parts: int, world: int) -> int:
    """The rank that writes (and whose machine serves) partition ``part``."""
    return part * world // num_parts


class RankTeam:
    """One rank of a multi-machine partitioning, as the pipeline's team.

    Args:
        comm (ArrayComm): the ranks.
        identity (dict): what every rank must agree on (options and the input as this
            rank sees it); checked when the output is entered.
    """
    bars = False

    def __init__(self, comm: ArrayComm, identity: Dict[str, object]) -> None:
        self.comm, self.identity = comm, identity

    def parts(self, num_parts: int) -> List[int]:
        return [p for p in range(num_parts)
                if writer_of(p, num_parts, self.comm.world) == self.comm.rank]

    def gather(self, values: Dict[int, T], what: str) -> List[T]:
        merged = {p: v for e in self.comm.allgather(values, what) for p, v in e.items()}
        return [merged[p] for p in sorted(merged)]

    @contextmanager
    def output(self, root: Path, overwrite: bool) -> Iterator[Path]:
        """Checks that every rank can start and agrees, then claims this rank's
        temporary folder (collective)."""
        error: Optional[BaseException] = None
        try:
            files.prepare_folder(root, overwrite, "--overwrite")
        except (OSError, ValueError) as exc:
            error = exc
        infos = self.comm.allgather({"fields": self.identity, "error": None if error is None
                                     else f"{type(error).__name__}: {error}",
                                     "host": socket.gethostname()}, "starting to partition")
        check_start(self.comm.rank, infos, error)
        tmp = leftovers.claim(root)
        try:
            yield tmp
        finally:
            leftovers.release(tmp, root)

    def finish(self, tmp: Path, root: Path, meta: PartitionMeta) -> None:
        """Gathers the partitions of ranks sharing a file system into one folder per
        file system, writes META there and renames it to ``root`` (collective)."""
        comm = self.comm
        token = comm.allgather(uuid.uuid4().hex if comm.rank == 0 else None,
                               "finishing the output")[0]
        (tmp / f".rank-{comm.rank}-{token}").touch()
        folders = comm.allgather(str(tmp), "finishing the output")
        leaders = comm.allgather(min(self.visible(folders, token)), "finishing the output")
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
                files.sync_tree(tmp)  # durable before the rename, as one process does
        except OSError as exc:
            error = exc
        comm.check("gathering the partitions", error)
        if leaders[comm.rank] == comm.rank:
            renames.swap_in(tmp, root)
        comm.check("renaming the output folder", None)

    def visible(self, folders: List[str], token: str) -> List[int]:
        """The ranks whose temporary folder (``folders``, by rank) this rank sees: those
        on its file system (each marked its folder with ``token``)."""
        return [r for r, f in enumerate(folders) if (Path(f) / f".rank-{r}-{token}").exists()]

    def reached(self, phase: str) -> None:
        pass


def check_start(rank: int, infos: List[dict], error: Optional[BaseException]) -> None:
    """Raises this rank's own error, or one naming the ranks that cannot start, or one
    naming the first field a rank disagrees on (``infos``: every rank's, by rank)."""
    if error is not None:
        raise error
    failed = [f"rank {r} ({i['host']}): {i['error']}" for r, i in enumerate(infos)
              if i["error"]]
    if failed:
        raise PeerFailedError("partitioning cannot start on other rank(s): "
                              + "; ".join(failed))
    mine = infos[rank]["fields"]
    for r, info in enumerate(infos):
        for key, value in info["fields"].items():
            if value != mine[key]:
                raise DisagreementError(
                    f"ranks disagree on {key}: rank {rank} has {mine[key]!r}, "
                    f"rank {r} ({info['host']}) has {value!r} (every rank must run the "
                    f"same command on the same input)")
