"""Every numeric option of ``pyg-dist-partition`` is checked: exit 2 and one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyg_dist.cli.partition import main

BASE = ["--dataset", "synthetic", "--num-nodes", "60", "--avg-degree", "4", "--feat-dim", "2",
        "--num-classes", "2", "--num-parts", "2", "--quiet"]
BAD = [("--avg-degree", "-5"), ("--avg-degree", "nan"), ("--avg-degree", "inf"),
       ("--avg-degree", "0"), ("--num-nodes", "-3"), ("--num-nodes", "1"),
       ("--feat-dim", "0"), ("--feat-dim", "-1"), ("--num-classes", "0"),
       ("--num-classes", "-2"), ("--num-parts", "-1"), ("--num-parts", "0"),
       ("--seed", "-1"), ("--num-nodes", "1e3"), ("--avg-degree", "x")]


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("option,value", BAD, ids=[f"{o}={v}" for o, v in BAD])
def test_bad_number_is_a_one_line_usage_error(tmp_path: Path, capsys, option: str, value: str,
                                              hetero: bool) -> None:
    out = tmp_path / "o"
    code = main(BASE + ["--out", str(out), option, value] + (["--hetero"] if hetero else []))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and option in err and "Traceback" not in err, err
    assert not out.exists()


def test_good_numbers_partition(tmp_path: Path, capsys) -> None:
    for hetero in ([], ["--hetero"]):
        out = tmp_path / f"o{len(hetero)}"
        assert main(BASE + ["--out", str(out), "--seed", "0"] + hetero) == 0
        assert (out / "META.json").is_file()
    assert "uid" in capsys.readouterr().out
