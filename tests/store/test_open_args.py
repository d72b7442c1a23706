"""``from_partition`` arguments: a wrong type or a path to a file says what is expected."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.datasets import community_graph

STORES = (LocalGraphStore, LocalFeatureStore)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("args") / "parts"
    Partitioner(community_graph(120, 4.0, 4, 3, seed=0), 2, out, progress=False).generate()
    return out


@pytest.mark.parametrize("store", STORES)
def test_pid_as_a_string_names_pid(root: Path, store) -> None:
    with pytest.raises(TypeError, match=r"pid must be an integer partition id, got str '0'"):
        store.from_partition(root, "0")
    with pytest.raises(TypeError, match=r"pid must be an integer .* got bool"):
        store.from_partition(root, True)
    assert store.from_partition(str(root), np.int64(1)).part == 1  # numpy ints are ids


@pytest.mark.parametrize("store", STORES)
def test_meta_file_instead_of_the_folder_says_so(root: Path, store) -> None:
    with pytest.raises(NotADirectoryError, match=rf"{root}/META\.json is a file, not a "
                                                 rf"folder: pass the folder that holds "
                                                 rf"META\.json \({root}\)"):
        store.from_partition(str(root) + "/META.json", 0)


@pytest.mark.parametrize("store", STORES)
def test_other_wrong_types_name_the_argument(root: Path, store) -> None:
    with pytest.raises(TypeError, match="root must be the partition folder"):
        store.from_partition(None, 0)
    with pytest.raises(TypeError, match="verify must be True or False, got str 'yes'"):
        store.from_partition(root, 0, verify="yes")
    with pytest.raises(TypeError, match="mmap must be True or False"):
        store.from_partition(root, 0, mmap=1)
