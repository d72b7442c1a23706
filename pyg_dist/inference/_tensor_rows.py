"""Every place where inference reads or writes ``DistTensor`` rows or seeds a loader by id.

Inside :mod:`pyg_dist.inference` nodes are named by their **relabelled** (range) ids:
partition ``p`` owns ``[node_offsets[p], node_offsets[p+1])`` and a ``DistTensor``
created with ``partition=`` the node book keeps a node's row at that id. Loaders take
and batches return the dataset's original ids (``batch.part_n_id`` holds the relabelled
ones), so loader seeds are translated here; nothing else in the package indexes a
``DistTensor`` or a batch by id. Exports are written in original ids.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Set, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding import DistTensor
from pyg_dist.format._book import RangeBook
from pyg_dist._madvise import MADV_DONTNEED, advise
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._local import LocalSampler
from pyg_dist._typing import NodeType

_RUNS = itertools.count()


@dataclass
class FetchStats:
    """Rows (and their bytes) this process read from other ranks, since the last reset.

    Args:
        rows (int): distinct remote rows per request, summed over requests.
        bytes (int): their size in bytes.
    """
    rows: int = 0
    bytes: int = 0


FETCHED = FetchStats()


def reset_fetch_stats() -> FetchStats:
    """Returns the counts so far and starts counting afresh."""
    done = FetchStats(FETCHED.rows, FETCHED.bytes)
    FETCHED.rows = FETCHED.bytes = 0
    return done


def count_fetched(num_rows: int, row_bytes: int) -> None:
    FETCHED.rows += num_rows
    FETCHED.bytes += num_rows * row_bytes


def run_prefix() -> str:
    """A name prefix for one inference run (the same on every rank: runs are collective
    and every rank makes them in the same order)."""
    return f"pyg_dist.inference.{next(_RUNS)}"


def node_rows(name: str, book: RangeBook, dim: int,
              fill: Optional[Callable[[int, int], Tensor]] = None,
              chunk: int = 65536) -> DistTensor:
    """A float32 ``[num_nodes, dim]`` tensor sharded like the graph (collective).

    Args:
        name (str): the tensor's name (the same on every rank).
        book (RangeBook): the node partition book.
        dim (int): the row width.
        fill (callable, optional): ``fill(start, stop)`` gives the rows of relabelled
            ids ``[start, stop)``; this rank's rows are filled with it, ``chunk`` rows at
            a time. (default: zeros)
        chunk (int): rows filled at a time.
    """
    tensor = DistTensor((book.total, dim), dtype=torch.float32, name=name, partition=book)
    if fill is not None:
        start, stop = tensor.local_range
        for lo in range(start, stop, chunk):
            hi = min(lo + chunk, stop)
            write_own_rows(tensor, lo, fill(lo, hi).to(torch.float32))
    return tensor


def own_range(tensor: DistTensor) -> Tuple[int, int]:
    """Relabelled ids ``[start, stop)`` of the rows this rank owns (and computes)."""
    return tensor.local_range


def read_rows(tensor: DistTensor, ids: Tensor) -> Tensor:
    """Rows of relabelled ``ids``: own rows directly, every other owner's in one request."""
    start, stop = tensor.local_range
    remote = ids[(ids < start) | (ids >= stop)]
    if remote.numel():
        count_fetched(int(torch.unique(remote).numel()), 4 * int(tensor.shape[1]))
    return tensor[ids]


def write_own_rows(tensor: DistTensor, start: int, values: Tensor) -> None:
    """Writes rows of this rank's own relabelled ids ``[start, start + len(values))``."""
    first, stop = tensor.local_range
    if not first <= start <= start + values.size(0) <= stop:
        raise ValueError(f"rows [{start}, {start + values.size(0)}) are not owned by this "
                         f"rank ([{first}, {stop}))")
    with tensor.lock:
        tensor.local_data[start - first:start - first + values.size(0)] = values


def write_rows(tensor: DistTensor, ids: Tensor, values: Tensor) -> None:
    """Writes ``values`` to the rows of relabelled ``ids`` (at their owners)."""
    tensor[ids.cpu()] = values


def own_rows(tensor: DistTensor, start: int, stop: int) -> Tensor:
    """A copy of this rank's own rows of relabelled ids ``[start, stop)``."""
    first, _ = tensor.local_range
    with tensor.lock:
        return tensor.local_data[start - first:stop - first].clone()


def release(tensor: DistTensor) -> None:
    """Frees this rank's rows of an intermediate tensor nobody reads any more (every rank
    must have passed a barrier after its last read)."""
    with tensor.lock:
        tensor.local_data.set_()


def seeds_of(features: object, start: int, stop: int,
             node_type: Optional[NodeType] = None) -> Tensor:
    """Loader seeds for the nodes of ``node_type`` (``None``: the homogeneous graph's
    one type) of relabelled ids ``[start, stop)``: loaders take the dataset's original
    ids, which the partition's id table gives."""
    node_type = features.meta.node_types[0] if node_type is None else node_type
    return features.id_tables.to_original("node", node_type, torch.arange(start, stop))


def count_batch_fetches(batch: object, part_start: int, part_stop: int, row_bytes: int) -> None:
    """Counts the rows of a loader batch that came from other partitions."""
    n_id = batch.part_n_id
    count_fetched(int(((n_id < part_start) | (n_id >= part_stop)).sum()), row_bytes)


def batch_seeds(batch: object) -> Tensor:
    """The relabelled ids of a loader batch's seed nodes (its first ``batch_size`` nodes;
    ``batch.n_id`` holds their original ids)."""
    return batch.part_n_id[:batch.batch_size]


class FeatureRows:
    """The first layer's input: node features read where the partitions keep them.

    Own rows come from the local store, other partitions' rows through the sampler's
    feature fetcher (one request per owner per batch, or straight from a same-machine
    partition's mapped files when direct reads are on), so the features are never
    copied into a ``DistTensor``.

    Args:
        features (LocalFeatureStore): this rank's partition's features.
        x_attr (str): the node feature attribute.
        serving (tuple, optional): ``(RpcGroup, LocalSampler)`` serving this partition
            (``None`` in a single process: every row is local).
    """

    def __init__(self, features: object, x_attr: str,
                 serving: Optional[Tuple[RpcGroup, LocalSampler]] = None) -> None:
        meta = features.meta
        self.features, self.x_attr = features, x_attr
        self.widths: Dict[NodeType, int] = {}
        for node_type in meta.node_types:
            spec = meta.node_attrs.get(node_type, {}).get(x_attr)
            if spec is not None and features.has(node_type, x_attr):
                if len(spec.shape) != 1:
                    raise ValueError(f"node attribute '{x_attr}' of {node_type!r} must be a "
                                     f"2-D feature matrix, got rows of shape {spec.shape}")
                self.widths[node_type] = int(spec.shape[0])
        self.group = serving[0] if serving is not None else None
        self.fetcher = None if serving is None else FeatureFetcher(
            serving[0], serving[1], meta, node_attrs={t: [x_attr] for t in self.widths},
            edge_attrs={t: [] for t in meta.edge_types})
        self.books = {t: meta.node_book(t) for t in self.widths}
        self.part = features.part

    def read(self, node_type: NodeType, ids: Tensor) -> Optional[Tensor]:
        """float32 features of relabelled ``ids`` (``None``: the type has none)."""
        if node_type not in self.widths:
            return None
        book = self.books[node_type]
        start = book.start(self.part)
        remote = (ids < start) | (ids >= start + book.size(self.part))
        if not bool(remote.any()):
            return self.features.gather(node_type, self.x_attr, ids).to(torch.float32)
        count_fetched(int(remote.sum()), 4 * self.widths[node_type])
        assert self.fetcher is not None and self.group is not None, \
            "remote rows without an RPC group"
        got = self.group.loop.run(self.fetcher.fetch({node_type: ids}, {}, wire=False),
                                  timeout=self.group.ctx.rpc_timeout + 5)
        return got.nodes[node_type][self.x_attr].to(torch.float32)

    def after_batch(self) -> None:
        """Drops the feature pages this process mapped (its own partition's, and those
        of same-machine partitions read directly) from its resident set, so a process
        holds about one batch of them (see ``LocalFeatureStore.drop_pages``)."""
        stores = [self.features]
        if self.group is not None:
            stores += [served["features"] for served in direct.of(self.group).served.values()]
        for store in stores:
            for node_type in self.widths:
                if store.has(node_type, self.x_attr):
                    store.drop_pages(node_type, self.x_attr)



def _drop_pages(data: Tensor) -> None:
    """Drops the pages of a shared file mapping from this process (they stay in the
    page cache, or on disk: nothing is lost, unlike a private mapping's)."""
    advise(data.data_ptr(), data.numel() * data.element_size(), MADV_DONTNEED, inward=False)


class Scratch:
    """Where the hidden states of one inference run live: in memory, or in files mapped
    from ``folder`` (for hidden states larger than memory: the kernel writes their pages
    back and drops them instead of running out of memory). A file is unlinked as soon as
    it is mapped, so nothing is left behind, even by a killed process. After every
    batch (:meth:`after_batch`), and after every read a peer makes while this rank
    waits for it, the mapped pages leave this process's resident set
    (``madvise(MADV_DONTNEED)``: they stay in the page cache, or on disk, and fault back
    in when read), so a process holds about one batch of hidden states.

    Args:
        folder (str or Path, optional): an existing folder on a local disk (``None``:
            memory).
    """

    def __init__(self, folder: Optional[Union[str, Path]] = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None and not self.folder.is_dir():
            raise ValueError(f"scratch_dir {self.folder} is not an existing folder")
        self.mapped: Set[str] = set()

    def node_rows(self, name: str, book: RangeBook, dim: int) -> DistTensor:
        """A zero float32 ``[num_nodes, dim]`` tensor sharded like the graph (collective)."""
        if self.folder is None:
            return node_rows(name, book, dim)
        path = self.folder / f".{name}.{os.getpid()}.f32"

        def mapped(shape: Tuple[int, ...], dtype: torch.dtype) -> Tensor:
            count = math.prod(shape)
            if count == 0:
                return torch.zeros(shape, dtype=dtype)
            data = torch.from_file(str(path), shared=True, size=count, dtype=dtype)
            path.unlink()  # the mapping keeps the pages; the name is not needed
            return data.view(shape)

        tensor = DistTensor((book.total, dim), dtype=torch.float32, name=name, partition=book,
                            init_func=mapped)
        tensor.on_read(_drop_pages)  # also the pages a peer's read brought in
        self.mapped.add(tensor.name)
        return tensor

    def after_batch(self, tensors: Iterable[DistTensor]) -> None:
        """Drops the mapped pages of ``tensors`` from this process's resident set."""
        for tensor in tensors:
            if tensor.name in self.mapped:
                with tensor.lock:
                    _drop_pages(tensor.local_data)

    def release(self, tensor: DistTensor) -> None:
        """Frees (or unmaps) this rank's rows of an intermediate tensor nobody reads any
        more (every rank must have passed a barrier after its last read)."""
        release(tensor)
        self.mapped.discard(tensor.name)
