"""The examples are single files a user can copy: public API only, no test hooks, short
enough to read in one sitting."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))
# pyg_dist packages whose public names (``__all__``) examples may import
PUBLIC = {"pyg_dist", "pyg_dist.inference", "pyg_dist.embedding", "pyg_dist.checkpoint",
          "pyg_dist.loop"}
MAX_LINES = 150


def test_every_example_is_one_file():
    names = [p.name for p in EXAMPLES]
    assert names == ["embedding_node_classification.py", "hetero_node_classification.py",
                     "inference.py", "link_prediction.py", "node_classification.py"], names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_reads_in_one_sitting(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{path.name}: {len(lines)} lines (at most {MAX_LINES})"
    tree = ast.parse("\n".join(lines))
    classes = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    assert "Trainer" not in classes, "the loop is written out, not a shared class"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_uses_only_the_public_api(path):
    text = path.read_text()
    assert "PYG_DIST_TEST" not in text and "os.environ" not in text and "getenv" not in text, \
        "test hooks in an example"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                assert top != "pyg_dist" or alias.name in PUBLIC, alias.name
                assert not alias.name.startswith("_"), alias.name
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "relative import of a helper module"
            if node.module.split(".")[0] != "pyg_dist":
                continue
            assert node.module in PUBLIC, f"{path.name} imports internal {node.module}"
            exported = set(importlib.import_module(node.module).__all__)
            for alias in node.names:
                assert alias.name in exported or \
                    f"{node.module}.{alias.name}" in PUBLIC, f"{node.module}.{alias.name}"
