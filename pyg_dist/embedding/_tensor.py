"""``DistTensor``: a tensor whose rows are sharded over the ranks of a job."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding import _shards as shards
from pyg_dist.embedding._comm import Comm
from pyg_dist.embedding._layout import GraphRows, PartitionLike, ShardLayout, resolve_book
from pyg_dist.format._book import RangeBook
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc._routing import RemoteResponseError, fan_out, split_by_owner
from pyg_dist.store._original_ids import BATCH_IDS

InitFunc = Callable[[Tuple[int, ...], torch.dtype], Tensor]
Index = Union[int, slice, Sequence[int], Tensor]

_ANONYMOUS = itertools.count()


def zeros_init(shape: Tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """The default ``init_func``: a shard of zeros."""
    return torch.zeros(shape, dtype=dtype)


class DistTensor:
    """A tensor whose rows are sharded over the ranks of a job; each row has exactly
    one owner rank (see :mod:`pyg_dist.embedding._layout` for who owns what).

    ``t[ids]`` reads rows: local rows directly, remote rows in one RPC per owner rank,
    all in flight together. ``t[ids] = values`` writes them (when ``ids`` repeats, the
    last value given for an id wins).

    **Which ids.** A tensor created with ``partition=`` a
    :class:`~pyg_dist.format._meta.PartitionMeta` holds one row per node of the graph and
    is indexed by the dataset's **original** node ids, like every id at pyg_dist's API
    (:mod:`pyg_dist.store._original_ids`); each row lives with its node's owner. Ids are
    translated without an extra round trip on the common paths: a batch's ``n_id``
    (the loader remembers its ``part_n_id``) and ids this rank's partition owns (its
    mapped id table); other ids are asked of the other partitions first (one request
    per partition). :meth:`read`/:meth:`write` with ``relabelled=True`` take the
    internal (relabelled) ids instead, e.g. ``batch.part_n_id``. A tensor laid out by
    a :class:`~pyg_dist.format._book.RangeBook`, by offsets or evenly is indexed by its
    row ids as given (for a graph's node book, the relabelled ids). Creation is collective:
    every rank must create the same tensors in the same order. A named tensor created
    again (with the same shape, dtype and layout) refers to the same rows and is not
    re-initialised.

    Works without RPC in a single process (standalone mode): the one rank owns all rows.

    Args:
        shape (Sequence[int]): global shape; rows are ``shape[0]``.
        dtype (torch.dtype): element type. (default: ``torch.float32``)
        name (str, optional): name shared by every rank; ``None`` picks one (ranks must
            then create their unnamed tensors in the same order).
        init_func (callable, optional): ``init_func(shard_shape, dtype)`` returns the
            initial rows of each rank's shard. (default: zeros)
        partition (RangeBook or PartitionMeta or Sequence[int], optional): the node
            partition book the rows follow (rows are nodes of one type); ``None``
            splits rows evenly over the ranks.
        node_type (str, optional): the node type, when ``partition`` is the
            :class:`PartitionMeta` of a heterogeneous graph.
    """

    def __init__(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                 name: Optional[str] = None, init_func: Optional[InitFunc] = None,
                 partition: PartitionLike = None, node_type: Optional[str] = None) -> None:
        self._comm = Comm.current()
        self._name = name if name is not None else f"_dist_tensor_{next(_ANONYMOUS)}"
        self._graph: Optional[GraphRows] = None
        error: Optional[Exception] = None
        try:
            self._shape = _as_shape(shape)
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
            self.partition: Optional[RangeBook] = resolve_book(partition, node_type,
                                                               self._shape[0])
            layout = ShardLayout.build(self._shape[0], self._comm.world_size,
                                       self._comm.rank, self.partition)
            if isinstance(partition, PartitionMeta):
                self._graph = GraphRows(partition, node_type, self._name)
        except (TypeError, ValueError, KeyError) as exc:  # raised after telling the others
            error = exc
        self._check_same_on_every_rank(error or (dtype, layout))
        self._shard = self._create_shard(dtype, layout, init_func or zeros_init)

    def _check_same_on_every_rank(self, mine: Any) -> None:
        """Collective: every rank's arguments must agree (or one rank's error is raised
        on every rank)."""
        if isinstance(mine, Exception):
            spec: Any = f"{type(mine).__name__}: {mine}"
        else:
            spec = (self._name, tuple(self._shape), str(mine[0]), mine[1].offsets)
        specs = self._comm.all_gather_object(spec)
        if isinstance(mine, Exception):
            raise mine
        failed = [f"rank {r}: {s}" for r, s in enumerate(specs) if isinstance(s, str)]
        if failed:
            raise RuntimeError(f"creating DistTensor '{self._name}' failed on other rank(s):\n"
                               + "\n".join(failed))
        if any(s != spec for s in specs):
            lines = "\n".join(f"  rank {r}: name={s[0]!r}, shape={s[1]}, dtype={s[2]}"
                              for r, s in enumerate(specs))
            raise ValueError(f"ranks disagree on the DistTensor they create together (every "
                             f"rank must create the same tensors in the same order):\n{lines}")

    def _create_shard(self, dtype: torch.dtype, layout: ShardLayout,
                      init_func: InitFunc) -> shards.Shard:
        error: Optional[Exception] = None
        shard = None
        namespace = self._comm.namespace
        try:
            if shards.exists(namespace, self._name):  # the same rows again, as they are
                data = torch.empty((0, *self._shape[1:]), dtype=dtype)
            else:
                data = _init_rows(init_func, (layout.stop - layout.start, *self._shape[1:]),
                                  dtype, self._name)
            shard = shards.register(namespace, shards.Shard(self._name, self._shape, dtype,
                                                            layout, data))
        except Exception as exc:  # re-raised here and reported to every other rank
            error = exc
        # nobody reads a peer's rows before every rank has registered its shard
        self._comm.agree(error, f"creating DistTensor '{self._name}'")
        assert shard is not None
        return shard

    # ---- torch-like attributes ---------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._shard.dtype

    @property
    def name(self) -> str:
        return self._name

    def size(self, dim: Optional[int] = None) -> Union[torch.Size, int]:
        return self._shape if dim is None else self._shape[dim]

    def dim(self) -> int:
        return len(self._shape)

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        return (f"DistTensor(name={self._name!r}, shape={tuple(self._shape)}, "
                f"dtype={self.dtype}, rank={self._comm.rank}, "
                f"local_rows=[{self.layout.start}, {self.layout.stop}))")

    # ---- ownership ---------------------------------------------------------------
    @property
    def layout(self) -> ShardLayout:
        return self._shard.layout

    @property
    def local_range(self) -> Tuple[int, int]:
        """Global rows ``[start, stop)`` owned by this rank."""
        return self.layout.start, self.layout.stop

    @property
    def local_data(self) -> Tensor:
        """This rank's rows (the stored tensor itself, not a copy)."""
        return self._shard.data

    def on_read(self, fn: Optional[Callable[[Tensor], None]]) -> None:
        """Calls ``fn(local_data)`` after every read of this rank's rows, its own or a
        peer's, under :attr:`lock` (``None``: nothing). Layer-wise inference drops the
        pages of mapped hidden states this way, also while it serves peers' reads."""
        self._shard.after_read = fn

    @property
    def lock(self) -> Any:
        """Held while this rank's rows are read or written."""
        return self._shard.lock

    @property
    def comm(self) -> Comm:
        return self._comm

    # ---- reads and writes ----------------------------------------------------------
    @property
    def follows_graph(self) -> bool:
        """Whether rows are graph nodes indexed by original ids (``partition=`` a
        :class:`~pyg_dist.format._meta.PartitionMeta`)."""
        return self._graph is not None

    def __getitem__(self, index: Index) -> Tensor:
        """Rows of ``index`` (int, slice, list or integer tensor of any shape; original
        node ids when :attr:`follows_graph`): shape ``(*index.shape, *self.shape[1:])``."""
        return self.read(index)

    def __setitem__(self, index: Index, values: Tensor) -> None:
        """Writes ``values`` (same dtype, shape ``(*index.shape, *self.shape[1:])``) to the
        rows of ``index``, at their owners (see :meth:`write`)."""
        self.write(index, values)

    def read(self, index: Index, relabelled: bool = False, argument: str = "index") -> Tensor:
        """Rows of ``index``.

        Args:
            index: ids (int, slice, list or integer tensor of any shape).
            relabelled (bool): ``index`` holds internal row ids (relabelled node ids)
                rather than original node ids (only matters when :attr:`follows_graph`).
            argument (str): the caller's argument name, for error messages.
        """
        rows, out_shape = self.rows(index, relabelled, argument)
        return self._read(rows).view(*out_shape, *self._shape[1:])

    def write(self, index: Index, values: Tensor, relabelled: bool = False,
              argument: str = "index") -> None:
        """Writes ``values`` to the rows of ``index`` (as :meth:`read`)."""
        ids, out_shape = self.rows(index, relabelled, argument)
        self._check_values(values, out_shape)
        values = values.reshape(ids.numel(), *self._shape[1:])
        uniq, inverse = torch.unique(ids, return_inverse=True)
        # the last value given for a repeated id wins
        last = torch.full((uniq.numel(),), -1, dtype=torch.long).scatter_reduce_(
            0, inverse, torch.arange(ids.numel()), reduce="amax")
        self._write(uniq, values.index_select(0, last))

    def rows(self, index: Index, relabelled: bool = False, argument: str = "index"
             ) -> Tuple[Tensor, Tuple[int, ...]]:
        """Internal row ids of ``index`` as a flat ``int64`` tensor, and the shape of the
        index: original node ids translated when :attr:`follows_graph` (unless
        ``relabelled``), checked (dtype, range) naming ``argument``."""
        remembered = BATCH_IDS.recall(index) if self._graph is not None and \
            not relabelled else None
        ids, shape = self.flat_ids(index, argument)
        if self._graph is None or relabelled:
            return ids, shape
        if remembered is not None and remembered.numel() == ids.numel():
            return remembered.detach().to("cpu", torch.long).reshape(-1), shape
        return self._graph.relabelled(ids, argument, self._run), shape

    def flat_ids(self, index: Index, argument: str = "index") -> Tuple[Tensor, Tuple[int, ...]]:
        """The ids of ``index`` as a flat ``int64`` tensor (checked: integers in range,
        the error naming ``argument``), and the shape of the index."""
        if isinstance(index, bool):
            raise TypeError(f"DistTensor '{self._name}' is indexed by integer ids, got a bool")
        if isinstance(index, int):
            ids = torch.tensor(index, dtype=torch.long)
        elif isinstance(index, slice):
            ids = torch.arange(*index.indices(self._shape[0]), dtype=torch.long)
        elif isinstance(index, Tensor):
            if index.dtype == torch.bool or index.dtype.is_floating_point or \
                    index.dtype.is_complex:
                raise TypeError(f"DistTensor '{self._name}' is indexed by integer ids, got "
                                f"{argument} of dtype {index.dtype}")
            ids = index.detach().to("cpu", torch.long)
        elif isinstance(index, (list, tuple)):
            ids = torch.as_tensor(index, dtype=torch.long) if len(index) else \
                torch.empty(0, dtype=torch.long)
        else:
            raise TypeError(f"DistTensor '{self._name}' is indexed by integer ids (int, slice, "
                            f"list or integer tensor), got {argument} of type "
                            f"{type(index).__name__}")
        flat = ids.reshape(-1)
        if flat.numel():
            lo, hi = int(flat.min()), int(flat.max())
            if lo < 0 or hi >= self._shape[0]:
                raise ValueError(f"DistTensor '{self._name}': {argument} holds id "
                                 f"{lo if lo < 0 else hi}, out of range [0, {self._shape[0]})")
        return flat, tuple(ids.shape)

    def _check_values(self, values: Tensor, index_shape: Tuple[int, ...]) -> None:
        if not isinstance(values, Tensor):
            raise TypeError(f"DistTensor '{self._name}': values must be a tensor, got "
                            f"{type(values).__name__}")
        if values.dtype != self.dtype:
            raise TypeError(f"DistTensor '{self._name}' holds {self.dtype}, got values of "
                            f"dtype {values.dtype}")
        expected = (*index_shape, *self._shape[1:])
        if tuple(values.shape) != expected:
            raise ValueError(f"DistTensor '{self._name}': values must have shape "
                             f"{expected} (ids {index_shape} + row {tuple(self._shape[1:])}), "
                             f"got {tuple(values.shape)}")

    def _read(self, ids: Tensor) -> Tensor:
        start, stop = self.local_range
        is_local = (ids >= start) & (ids < stop)
        if bool(is_local.all()):
            return self._shard.read(ids)
        local_pos, remote_pos = is_local.nonzero().view(-1), (~is_local).nonzero().view(-1)
        # each remote id is asked for once
        uniq, inverse = torch.unique(ids.index_select(0, remote_pos), return_inverse=True)
        owners = split_by_owner(uniq, self.layout.offsets, f"DistTensor '{self._name}'")
        out = torch.empty((ids.numel(), *self._shape[1:]), dtype=self.dtype)
        fetched = torch.empty((uniq.numel(), *self._shape[1:]), dtype=self.dtype)

        def local() -> None:
            out.index_copy_(0, local_pos, self._shard.read(ids.index_select(0, local_pos)))

        def scatter(pos: Tensor, rows: Tensor) -> None:
            self._check_rows(rows, pos.numel())
            fetched.index_copy_(0, pos, rows)

        async def fetch() -> Tensor:
            group = self._comm.group
            requests = [(pos, group.call_async(rank, "embedding.read", self._name, uniq[pos]))
                        for rank, pos in owners]
            await fan_out(requests, local, scatter)
            return out.index_copy_(0, remote_pos, fetched.index_select(0, inverse))

        return self._run(fetch())

    def _check_rows(self, rows: Any, count: int) -> None:
        """A peer's answer must be ``count`` rows of this tensor's dtype and row shape."""
        want = (count, *self._shape[1:])
        if not isinstance(rows, Tensor) or rows.dtype != self.dtype or \
                tuple(rows.shape) != want:
            got = (f"{rows.dtype} {tuple(rows.shape)}" if isinstance(rows, Tensor)
                   else type(rows).__name__)
            raise RemoteResponseError(f"DistTensor '{self._name}': a peer answered with {got}, "
                                      f"expected {self.dtype} {want}")

    def _write(self, uniq: Tensor, values: Tensor) -> None:
        me = self._comm.rank
        owners = split_by_owner(uniq, self.layout.offsets, f"DistTensor '{self._name}'")
        mine = [pos for rank, pos in owners if rank == me]
        remote = [(rank, pos) for rank, pos in owners if rank != me]

        def local() -> None:
            for pos in mine:
                self._shard.write(uniq[pos], values[pos])

        if not remote:
            local()
            return

        async def send() -> None:
            group = self._comm.group
            requests = [(rank, group.call_async(rank, "embedding.write", self._name, uniq[pos],
                                                values[pos].contiguous()))
                        for rank, pos in remote]
            await fan_out(requests, local)

        self._run(send())

    def _run(self, coro: Any) -> Any:
        group = self._comm.group
        assert group is not None, "remote rows without an RPC group"
        return group.loop.run(coro, timeout=group.ctx.rpc_timeout + 5)


def _as_shape(shape: Any) -> torch.Size:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(int(s) for s in shape)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from exc
    if not dims or any(d < 0 for d in dims):
        raise ValueError(f"shape must have at least one dimension and no negative sizes, "
                         f"got {dims}")
    return torch.Size(dims)


def _init_rows(init_func: InitFunc, shape: Tuple[int, ...], dtype: torch.dtype,
               name: str) -> Tensor:
    data = init_func(shape, dtype)
    if not isinstance(data, Tensor) or tuple(data.shape) != shape or data.dtype != dtype:
        got = (f"{tuple(data.shape)} {data.dtype}" if isinstance(data, Tensor)
               else type(data).__name__)
        raise ValueError(f"init_func of DistTensor '{name}' must return a {dtype} tensor of "
                         f"shape {shape} (this rank's shard), got {got}")
    return data.detach().to("cpu").contiguous()
