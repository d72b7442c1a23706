"""The health watchdog when the job's store goes away: torchrun's agent (the store's
host) SIGKILLed leaves its trainers orphaned; they must stop within the documented
bound, saying the store and its agent were lost (they kept training, or waited, and
blamed something else)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from pyg_dist.testing import free_port

SERVER = "import time, datetime, torch.distributed as d; " \
         "s = d.TCPStore('127.0.0.1', {port}, is_master=True, wait_for_workers=False, " \
         "timeout=datetime.timedelta(seconds=30)); print('up', flush=True); time.sleep(120)"

TRAINER = textwrap.dedent("""
    import time, datetime, torch.distributed as d
    from pyg_dist.rpc import _health as health
    store = d.TCPStore('127.0.0.1', {port}, is_master=False,
                       timeout=datetime.timedelta(seconds=5))
    health.Watchdog(store, 0, 1, health.WatchdogConfig(0.2, 1.0, {abort}),
                    '127.0.0.1:{port}')
    print('watching', flush=True)
    time.sleep(120)  # training on, as an orphan would
""")


@pytest.mark.multiprocess
@pytest.mark.serial  # a wall-clock bound
@pytest.mark.timeout(120)
def test_a_lost_store_ends_the_orphan_within_the_bound_naming_it():
    port, abort = free_port(), 6.0
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(port=port)],
                              stdout=subprocess.PIPE, text=True)
    trainer = None
    try:
        assert server.stdout.readline().strip() == "up"
        trainer = subprocess.Popen(
            [sys.executable, "-c", TRAINER.format(port=port, abort=abort)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert trainer.stdout.readline().strip() == "watching"
        server.kill()  # the agent, and the store with it, are gone
        lost = time.monotonic()
        try:
            out, _ = trainer.communicate(timeout=abort + 20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the orphan did not exit within {abort + 20:.0f}s of losing the "
                        f"store (bound: abort_after = {abort:.0f}s)")
        took = time.monotonic() - lost
        assert trainer.returncode == 1, out
        assert took <= abort + 5, f"exited {took:.1f}s after the store was lost\n{out}"
        assert f"rendezvous store at 127.0.0.1:{port} has not answered" in out, out
        assert "torchrun agent hosting it (or its machine) was lost" in out, out
        assert "orphaned" in out, out
    finally:
        for proc in (server, trainer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_store_lost_after_is_half_the_abort_bound():
    from pyg_dist.rpc._health import WatchdogConfig

    config = WatchdogConfig.for_timeout(20.0)
    assert config.abort_after == 60.0 and config.store_lost_after == 30.0
    assert WatchdogConfig(1.0, 5.0, None).store_lost_after is None


def test_the_abort_floor_is_configurable_and_keeps_its_default(monkeypatch):
    from pyg_dist.rpc._health import DEFAULT_MIN_ABORT_S, WatchdogConfig

    monkeypatch.delenv("PYG_DIST_WATCHDOG", raising=False)
    monkeypatch.delenv("PYG_DIST_WATCHDOG_MIN_ABORT", raising=False)
    assert DEFAULT_MIN_ABORT_S == 60.0
    assert WatchdogConfig.for_timeout(5.0).abort_after == 60.0  # the floor by default
    assert WatchdogConfig.for_timeout(45.0).abort_after == 90.0  # twice the timeout above it
    monkeypatch.setenv("PYG_DIST_WATCHDOG_MIN_ABORT", "12.5")
    config = WatchdogConfig.for_timeout(5.0)
    assert config.abort_after == 12.5 and config.store_lost_after == 6.25
    assert WatchdogConfig.for_timeout(10.0).abort_after == 20.0  # never under 2 timeouts
    assert WatchdogConfig.for_timeout(5.0, min_abort=0.0).abort_after == 10.0  # argument wins
    monkeypatch.setenv("PYG_DIST_WATCHDOG", "warn")  # warn still never aborts
    assert WatchdogConfig.for_timeout(5.0).abort_after is None


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf"])
def test_a_bad_abort_floor_is_refused_naming_the_variable(monkeypatch, raw):
    from pyg_dist.rpc._health import WatchdogConfig

    monkeypatch.setenv("PYG_DIST_WATCHDOG_MIN_ABORT", raw)
    with pytest.raises(ValueError, match=r"PYG_DIST_WATCHDOG_MIN_ABORT=.*expected seconds"):
        WatchdogConfig.for_timeout(5.0)
