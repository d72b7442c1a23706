"""Checkpoints of :class:`DistEmbedding` tables and their sparse optimizers.

One call saves tables *and* optimizer state (and hyper-parameters) together::

    save_checkpoint(path, embeddings=[emb], optimizers=[opt])   # collective
    load_checkpoint(path, embeddings=[emb], optimizers=[opt])   # collective

``path`` is a folder every rank sees (a shared file system on several machines).
Each save is atomic: every rank writes its rows into a new version folder, and the
checkpoint switches to it only after every rank has finished (the layout is in
:mod:`pyg_dist.embedding.checkpoint_files`); a crash or an error on any rank leaves
the previous checkpoint as it was. Rows are stored by global id, so a checkpoint
loads on any number of ranks. Tables are matched by name; optimizers by kind and
the names of the tables they train. Files are read with ``weights_only=True`` and
checked before use; a damaged file raises :class:`CheckpointError` naming it.

Every rank enters every collective, also after a local failure: an error on one
rank raises on every rank, naming the rank that failed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from torch import Tensor

from pyg_dist.embedding import checkpoint_files as files
from pyg_dist.embedding.checkpoint_manifest import (EMBEDDING_KIND, CheckpointError, Manifest,
                                                    PartEntry, ShardEntry, TensorEntry,
                                                    dtype_name, read_manifest)
from pyg_dist.embedding.comm import Comm
from pyg_dist.embedding.embedding import DistEmbedding, PathLike
from pyg_dist.embedding.optim import SparseOptimizer
from pyg_dist.embedding.tensor import DistTensor

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError"]


@dataclass
class _Part:
    """What one table or optimizer puts into a checkpoint."""
    kind: str
    name: Optional[str]
    config: Dict[str, Any]
    tensors: Dict[str, DistTensor]


Embeddings = Union[DistEmbedding, Sequence[DistEmbedding]]
Optimizers = Union[SparseOptimizer, Sequence[SparseOptimizer]]


def _as_lists(embeddings: Embeddings, optimizers: Optimizers,
              verb: str) -> Tuple[List[DistEmbedding], List[SparseOptimizer]]:
    """The arguments as lists, checked."""
    embs = [embeddings] if isinstance(embeddings, DistEmbedding) else list(embeddings)
    opts = [optimizers] if isinstance(optimizers, SparseOptimizer) else list(optimizers)
    for obj, cls in [(e, DistEmbedding) for e in embs] + [(o, SparseOptimizer) for o in opts]:
        if not isinstance(obj, cls):
            raise TypeError(f"expected a pyg_dist {cls.__name__}, got {type(obj).__name__}")
    if not embs and not opts:
        raise ValueError(f"nothing to {verb}: pass embeddings=[...] and/or optimizers=[...]")
    return embs, opts


def _parts(embeddings: List[DistEmbedding], optimizers: List[SparseOptimizer],
           comm: Comm) -> Tuple[List[_Part], List[_Part]]:
    tables = [_Part(EMBEDDING_KIND, e.name, {"num_embeddings": e.num_embeddings,
                                             "embedding_dim": e.embedding_dim},
                    {"weight": e.weight}) for e in embeddings]
    opts = [_Part(type(o).__name__, None,
                  {**o.hyper_parameters(), "params": [e.name for e in o.params]},
                  o.state_tensors()) for o in optimizers]
    names = [t.name for t in _tensors(tables + opts)]
    if len(set(names)) != len(names):
        raise ValueError(f"the same table or optimizer state is given twice: {sorted(names)}")
    if any(t.comm.namespace != comm.namespace for t in _tensors(tables + opts)):
        raise ValueError(f"some tensors belong to another RPC group than '{comm.namespace}'")
    return tables, opts


def _tensors(parts: Sequence[_Part]) -> List[DistTensor]:
    return [t for p in parts for t in p.tensors.values()]


def _gather(comm: Comm, error: Optional[BaseException], value: Any, what: str) -> List[Any]:
    """Collective: every rank's ``value``; raises like :meth:`Comm.agree` if ``what``
    failed on any rank."""
    message = None if error is None else f"{type(error).__name__}: {error}"
    gathered = comm.all_gather_object((message, value))
    if error is not None:
        raise error
    failed = [f"rank {r}: {m}" for r, (m, _) in enumerate(gathered) if m is not None]
    if failed:
        raise RuntimeError(f"{what} failed on {len(failed)} other rank(s):\n" + "\n".join(failed))
    return [v for _, v in gathered]


def save_checkpoint(path: PathLike, embeddings: Embeddings = (),
                    optimizers: Optimizers = ()) -> None:
    """Saves tables and optimizer state together, atomically (collective).

    Every rank calls it with the same objects. Each rank writes its rows into a new
    version folder of ``path``; rank 0 then writes the manifest and switches the
    checkpoint over to the new version. Until then, and whenever a rank fails or
    dies, ``path`` holds the previous checkpoint unchanged.

    Args:
        path: the checkpoint folder, visible to every rank (created if missing).
        embeddings (DistEmbedding or Sequence[DistEmbedding]): the tables to save.
        optimizers (SparseOptimizer or Sequence[SparseOptimizer]): optimizers
            whose state and hyper-parameters to save (their tables are saved only
            if also in ``embeddings``).

    Raises:
        CheckpointError, OSError, ...: this rank's failure; :class:`RuntimeError`
            naming the rank(s) that failed on the others.
    """
    comm, root = Comm.current(), Path(path)
    tables, opts, version = _prepare_save(comm, root, embeddings, optimizers)
    try:
        digests = _write_shards(comm, root / version, _tensors(tables + opts))
        _publish(comm, root, version, tables, opts, digests)
    except Exception:
        if comm.rank == 0:  # the failed version (the checkpoint stays the previous one)
            files.discard(root, version)
        raise


def _prepare_save(comm: Comm, root: Path, embeddings: Embeddings,
                  optimizers: Optimizers) -> Tuple[List[_Part], List[_Part], str]:
    """Collective: checks the arguments and that every rank saves the same objects;
    then rank 0 creates the new version folder, whose name every rank learns."""
    error: Optional[Exception] = None
    tables, opts, spec = [], [], None
    try:
        tables, opts = _parts(*_as_lists(embeddings, optimizers, "save"), comm)
        spec = [(p.kind, p.name, [(k, tuple(t.shape), str(t.dtype))
                                  for k, t in p.tensors.items()]) for p in tables + opts]
    except Exception as exc:  # re-raised by _gather, after every rank learnt of it
        error = exc
    specs = _gather(comm, error, spec, f"preparing checkpoint {root}")
    if any(s != spec for s in specs):  # the same error on every rank
        lines = "\n".join(f"  rank {r}: {s}" for r, s in enumerate(specs))
        raise ValueError(f"ranks disagree on what to save into {root}:\n{lines}")
    version = None
    try:
        if comm.rank == 0:
            version = files.new_version(root)
    except Exception as exc:  # re-raised by _gather, after every rank learnt of it
        error = exc
    return tables, opts, _gather(comm, error, version, f"creating a version in {root}")[0]


def _write_shards(comm: Comm, folder: Path, tensors: List[DistTensor]) -> Dict[str, str]:
    """Collective: every rank writes its rows of every tensor into ``folder``; returns
    the digest of every rank's shard files."""
    error: Optional[Exception] = None
    digests: Dict[str, str] = {}
    try:
        for i, tensor in enumerate(tensors):
            start, stop = tensor.local_range
            name = files.shard_file(i, comm.rank)
            with tensor.lock:
                digests[name] = files.write_shard(folder / name, start, stop,
                                                  tensor.local_data)
    except Exception as exc:  # re-raised by _gather, after every rank learnt of it
        error = exc
    shares = _gather(comm, error, digests, f"writing checkpoint shards into {folder}")
    return {name: value for share in shares for name, value in share.items()}


def _publish(comm: Comm, root: Path, version: str, tables: List[_Part],
             opts: List[_Part], digests: Dict[str, str]) -> None:
    """Collective: rank 0 checks that every shard is there, completes the version and
    makes it the current one."""
    error: Optional[Exception] = None
    if comm.rank == 0:
        try:
            manifest = _manifest(tables, opts, comm.world_size, digests)
            expected = {s.file: r for p in manifest.embeddings + manifest.optimizers
                        for t in p.tensors.values() for r, s in enumerate(t.shards)}
            missing = files.missing_files(root / version, expected)
            if missing is not None:
                raise CheckpointError(missing)
            files.publish(root, version, manifest.to_json())
        except Exception as exc:  # re-raised by agree, after every rank learnt of it
            error = exc
    comm.agree(error, f"finishing checkpoint {root / version}")


def _manifest(tables: List[_Part], opts: List[_Part], world_size: int,
              digests: Dict[str, str]) -> Manifest:
    counter = iter(range(len(_tensors(tables + opts))))

    def entry(part: _Part) -> PartEntry:
        tensors = {}
        for key, tensor in part.tensors.items():
            i = next(counter)
            shards = tuple(ShardEntry(files.shard_file(i, r), *tensor.layout.range_of(r),
                                      digests.get(files.shard_file(i, r)))
                           for r in range(world_size))
            tensors[key] = TensorEntry(tuple(tensor.shape), tensor.dtype, shards)
        return PartEntry(part.kind, part.name, part.config, tensors)
    return Manifest(world_size, tuple(map(entry, tables)), tuple(map(entry, opts)))


@dataclass
class _Rows:
    """Saved rows to copy into ``tensor``: ``(rows, first global id)`` pieces."""
    tensor: DistTensor
    pieces: List[Tuple[Tensor, int]]

    def copy(self) -> None:
        lo = self.tensor.local_range[0]
        with self.tensor.lock:
            for piece, start in self.pieces:
                self.tensor.local_data[start - lo:start - lo + piece.shape[0]] = piece


def load_checkpoint(path: PathLike, embeddings: Embeddings = (),
                    optimizers: Optimizers = ()) -> None:
    """Loads tables and optimizer state saved by :func:`save_checkpoint` (collective),
    on any number of ranks.

    Every file is read and checked before any row is overwritten; hyper-parameters
    are restored last, once every rank has its rows.

    Args:
        path: the checkpoint folder.
        embeddings (DistEmbedding or Sequence[DistEmbedding]): tables to fill,
            matched by name.
        optimizers (SparseOptimizer or Sequence[SparseOptimizer]): optimizers to
            restore, matched by kind and by the names of their tables.

    Raises:
        CheckpointError: naming the file, if the checkpoint is missing, damaged or
            does not hold what is asked for (:class:`RuntimeError` naming the rank
            on the other ranks).
    """
    comm, root = Comm.current(), Path(path)
    error: Optional[Exception] = None
    version, plan, apply = None, [], []
    try:
        embs, opts = _as_lists(embeddings, optimizers, "load")
        _parts(embs, opts, comm)  # the same checks as on save
        folder, version = files.current_version(root)
        manifest = read_manifest(folder / files.MANIFEST)
        plan, apply = _plan(folder, manifest, embs, opts)
    except Exception as exc:  # re-raised by _gather, after every rank learnt of it
        error = exc
    versions = _gather(comm, error, version, f"loading checkpoint {root}")
    if len(set(versions)) > 1:
        seen = ", ".join(f"rank {r}: {v or 'first layout'}" for r, v in enumerate(versions))
        raise CheckpointError(f"ranks see different versions of checkpoint {root} ({seen}): "
                              f"is it on a file system every rank shares?")
    try:
        for rows in plan:
            rows.copy()
    except Exception as exc:  # re-raised by agree, after every rank learnt of it
        error = exc
    comm.agree(error, f"loading checkpoint {root}")
    for restore in apply:
        restore()


def _plan(folder: Path, manifest: Manifest, embeddings: List[DistEmbedding],
          optimizers: List[SparseOptimizer]) -> Tuple[List[_Rows], List[Callable[[], None]]]:
    """What to copy where, with every needed file read and checked; and the
    hyper-parameters to set afterwards."""
    plan, apply = [], []
    for emb in embeddings:
        entry = _find_table(folder, manifest, emb, alone=len(embeddings) == 1)
        plan.append(_rows(folder, entry, "weight", emb.weight))
    for opt in optimizers:
        entry = _find_optimizer(folder, manifest, opt)
        try:
            values = opt.parse_hyper_parameters(entry.config)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{folder / files.MANIFEST}: bad {entry.kind} "
                                  f"hyper-parameters {entry.config} ({exc})") from exc
        plan.extend(_rows(folder, entry, key, t) for key, t in opt.state_tensors().items())
        apply.append(lambda opt=opt, values=values: opt.apply_hyper_parameters(values))
    return plan, apply


def _find_table(folder: Path, manifest: Manifest, emb: DistEmbedding, alone: bool) -> PartEntry:
    found = [e for e in manifest.embeddings if e.name == emb.name]
    if not found and alone and len(manifest.embeddings) == 1:
        found = [e for e in manifest.embeddings if e.name is None]  # first layout: no names
    if not found:
        raise CheckpointError(f"checkpoint {folder} has no table named '{emb.name}' (it "
                              f"holds {manifest.describe()})")
    return found[0]


def _find_optimizer(folder: Path, manifest: Manifest, opt: SparseOptimizer) -> PartEntry:
    kind, names = type(opt).__name__, [e.name for e in opt.params]
    for entry in manifest.optimizers:
        params = entry.config.get("params")
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise CheckpointError(f"{folder / files.MANIFEST}: the {entry.kind} entry's "
                                  f"config.params must be a list of table names, got {params!r}")
        if entry.kind == kind and set(names) <= set(params):
            return entry
    raise CheckpointError(f"checkpoint {folder} has no {kind} state for embedding(s) {names} "
                          f"(it holds {manifest.describe()})")


def _rows(folder: Path, part: PartEntry, key: str, tensor: DistTensor) -> _Rows:
    """The saved rows of ``part``'s tensor ``key`` that ``tensor``'s shard holds."""
    entry = part.tensors.get(key)
    if entry is None:
        raise CheckpointError(f"{folder / files.MANIFEST}: the {part.kind} entry has no "
                              f"tensor '{key}' (it holds {sorted(part.tensors)})")
    if entry.shape != tuple(tensor.shape) or entry.dtype != tensor.dtype:
        raise CheckpointError(f"checkpoint {folder}: '{key}' has shape {entry.shape} and dtype "
                              f"{dtype_name(entry.dtype)}, but '{tensor.name}' has shape "
                              f"{tuple(tensor.shape)} and dtype {dtype_name(tensor.dtype)}")
    lo, hi = tensor.local_range
    pieces = []
    for shard in entry.shards:
        a, b = max(lo, shard.start), min(hi, shard.stop)
        if a < b:
            rows = files.read_shard(folder / shard.file, shard, entry)
            pieces.append((rows[a - shard.start:b - shard.start], a))
    return _Rows(tensor, pieces)
