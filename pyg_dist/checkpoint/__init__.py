"""One checkpoint for everything a training job holds, Stateful-style.

::

    from pyg_dist import checkpoint

    state = {"model": ddp, "optim": opt, "sched": scheduler, "emb": emb,
             "sparse": sparse_opt, "train": train_loader, "epoch": 0}
    info = checkpoint.load(DIR, state)              # None: no checkpoint yet
    start = info.step if info is not None else 0    # state["epoch"] is the saved value
    ...
    checkpoint.save(DIR, step, state)

Both are collective: every rank passes the same keys and kinds (a difference raises
the same error on every rank, naming the keys). Each value of ``state`` is an entry:

- ``torch.nn.Module`` (plain or DDP) and torch ``Optimizer`` (of a module in ``state``):
  through ``torch.distributed.checkpoint``, so they reshard across world sizes;
- pyg_dist loaders: each rank's exact position;
- anything with ``state_dict()``/``load_state_dict()`` whose state is tensors, plain
  containers, JSON values and sharded tensors: ``DistEmbedding`` and
  ``SparseAdam``/``SparseAdagrad`` (rows saved by global id, resharded on load: ``k``
  ranks save, ``k'`` load), LR schedulers, your own objects;
- JSON values (returned in :attr:`CheckpointInfo.values` and written back into ``state``).

Everything goes through ``state``: the keywords of 0.1.0 (``model=``, ``optimizer=``,
``embeddings=``, ``sparse_optimizers=``, ``loaders=``, ``extra=``) are removed, and
passing one raises a ``TypeError`` that names its ``state=`` form.

A save is atomic (:mod:`pyg_dist.format._files`: a new version folder, then ``LATEST``):
``LATEST`` only ever names a complete version, which stays on disk until a newer complete
one is published, so a crash at any moment of a save leaves a loadable checkpoint (the
phases and what a failure in each leaves: :mod:`pyg_dist.checkpoint._versions`); the
newest ``keep`` versions are kept (the layout is in :mod:`pyg_dist.checkpoint._files`).
``load(..., version=NAME)`` loads another complete version than ``LATEST``'s, and the
``pyg-dist-checkpoint`` command lists, verifies and repoints versions. On another world size,
loader positions within an epoch do not map (each rank's seeds differ): loaders start at
the beginning of the epoch after the saved position, with a warning.

A checkpoint from elsewhere is safe to load: nothing in it is unpickled beyond tensors and
plain containers (DCP's metadata goes through a restricted unpickler, its values and every
other ``.pt`` file through ``torch.load(weights_only=True)``, the rest is JSON checked field
by field), every file read is checked against the digest recorded at save time, and a
damaged checkpoint raises :class:`CheckpointError` naming the file.
"""
from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._reading import CheckpointInfo, load
from pyg_dist.checkpoint._writing import save

__all__ = ["save", "load", "CheckpointInfo", "CheckpointError"]
