"""Helpers for tests: local multi-process launches and id-encoded toy graphs."""
from pyg_dist.testing.launch import RanksFailed, free_port, run_ranks, torchrun_env

__all__ = ["run_ranks", "free_port", "torchrun_env", "RanksFailed"]
