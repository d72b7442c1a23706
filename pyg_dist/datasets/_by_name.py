"""Datasets by name: Planetoid (our own reader), OGB node datasets, any PyG dataset class.

:func:`load_named` is what ``pyg-dist-partition --dataset NAME --root DIR`` reads.
Nothing is downloaded unless ``download=True``; a missing file raises
:class:`~pyg_dist.datasets._errors.MissingRawFilesError` naming the files and where
they are expected.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Optional, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets._errors import DatasetError, MissingRawFilesError
from pyg_dist.datasets._loading import PLANETOID, load_planetoid
from pyg_dist.datasets._ogb_nodes import is_ogb_name, load_ogb_node
from pyg_dist.datasets._pyg_classes import find_pyg_class, load_pyg_dataset, pyg_class_names

OGB_EXAMPLES = ("ogbn-arxiv", "ogbn-products", "ogbn-mag", "ogbn-proteins", "ogbn-papers100M")
CHOICES = ("Cora, CiteSeer, PubMed, synthetic, an OGB node dataset (ogbn-arxiv, "
           "ogbn-products, ogbn-mag), a torch_geometric.datasets class (e.g. Reddit, Flickr, "
           "Yelp, AmazonProducts, or Class:name such as Amazon:Computers), or a saved .pt graph")


def squeeze_labels(data: Union[Data, HeteroData]) -> Union[Data, HeteroData]:
    """Makes every ``[N, 1]`` label ``y`` 1-D (in place; returns ``data``)."""
    for store in data.node_stores:
        y = store.get("y")
        if y is not None and y.dim() == 2 and y.size(1) == 1:
            store.y = y.view(-1)
    return data


def _planetoid(name: str, root: Optional[Union[str, Path]], download: bool) -> Data:
    canonical = PLANETOID[name.lower()]
    if root is None:
        raise DatasetError(f"--root is required for {name} (the folder holding {canonical}/raw)")
    if not Path(root).is_dir() and not download:
        raise DatasetError(f"--root {root} does not exist")
    try:
        return load_planetoid(root, name)
    except FileNotFoundError:
        if not download:
            raise
    # PyG's Planetoid fetches the same raw files into the same layout
    return load_pyg_dataset(f"Planetoid:{canonical}", root, download=True)


def unknown(name: str) -> DatasetError:
    """The error for a name nothing matches, with close matches as suggestions."""
    known = list(PLANETOID.values()) + ["synthetic"] + list(OGB_EXAMPLES) + list(
        pyg_class_names())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.75) or difflib.get_close_matches(
        name.lower(), [k.lower() for k in known], n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return DatasetError(f"unknown dataset '{name}' (choose {CHOICES}){hint}")


def load_named(name: str, root: Optional[Union[str, Path]] = None,
               download: bool = False) -> Union[Data, HeteroData]:
    """The graph ``name`` names, read from ``root``, labels ``y`` squeezed to 1-D.

    Args:
        name (str): ``Cora``/``CiteSeer``/``PubMed`` (read by
            :func:`~pyg_dist.datasets._loading.load_planetoid`, nothing written), an
            ``ogbn-*`` name (needs ``pip install ogb``), or a ``torch_geometric.datasets``
            class, ``Class`` or ``Class:name``. Any case.
        root (str or Path, optional): the dataset folder, as the dataset's own loader
            takes it.
        download (bool): fetch missing files (default: raise instead).

    Raises:
        DatasetError: unknown name or unusable arguments (one line).
        MissingRawFilesError: files are missing and ``download`` is False.
        MissingDependencyError: ``ogb`` is needed and not installed.
        NotImplementedError: ``ogbn-papers100M`` (needs the chunked input path).
    """
    if name.lower() in PLANETOID:
        return squeeze_labels(_planetoid(name, root, download))
    if is_ogb_name(name):
        if root is None:
            raise DatasetError(f"--root is required for {name} (the folder holding "
                               f"{name.replace('-', '_')}/, as for ogb's "
                               f"PygNodePropPredDataset(name, root))")
        return squeeze_labels(load_ogb_node(name, root, download_missing=download))
    if find_pyg_class(name) is not None:
        return squeeze_labels(load_pyg_dataset(name, root, download=download))
    raise unknown(name)


__all__ = ["load_named", "squeeze_labels", "MissingRawFilesError", "DatasetError"]
