"""LABOR's kernels are warmed exactly when a job samples with LABOR: a neighbour job never
compiles them (a cold first start pays only for what it runs), and a LABOR job's
loader warms every signature its batches use before any peer may ask."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _run(mode: str) -> dict:
    done = subprocess.run([sys.executable, str(HERE / "labor_warm_workload.py"), mode],
                          capture_output=True, text=True, timeout=280, cwd=HERE.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_neighbour_job_compiles_no_labor_kernel():
    """In a fresh interpreter, a neighbour loader (whose construction warms up) and its
    batch leave LABOR's dispatchers without a single compiled signature."""
    report = _run("neighbor")
    assert report["labor"] == {}, f"LABOR compiled for a neighbour job: {report['labor']}"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_labor_loader_warms_every_signature_its_batches_use():
    """In a fresh interpreter, once a LABOR loader is built, LABOR batches (uniform,
    weighted, layer_dependency, all neighbours; heterogeneous, int32 indices, int64
    edge ids) compile nothing more; one LABOR kernel serves them all (int32 keys)."""
    report = _run("labor")
    assert report["new"] == {}, f"compiled after the LABOR loader was built: {report['new']}"
    fill = report["labor"].get("pyg_dist.sampler._labor_kernels.labor_fill", [])
    assert len(fill) == 1, report["labor"]


def test_labor_kernels_call_no_kernel_of_another_module():
    """numba invalidates a cached kernel when its own file changes, not when a callee's
    file does: every jitted function LABOR's kernels call is defined in their own module
    (so an edit to any recompiles all), the prefetch intrinsic excepted."""
    import numba
    from numba.core.extending import _Intrinsic

    from pyg_dist.sampler import _labor_kernels as kernels

    jitted = {name: value for name, value in vars(kernels).items()
              if isinstance(value, numba.core.dispatcher.Dispatcher)}
    assert "labor_fill" in jitted and "pick_by_rank" in jitted
    foreign = set()
    for name, kernel in jitted.items():
        assert kernel.py_func.__module__ == kernels.__name__, name
        for ref in kernel.py_func.__code__.co_names:
            callee = vars(kernels).get(ref)
            module = callee.py_func.__module__ if isinstance(
                callee, numba.core.dispatcher.Dispatcher) else \
                callee._defn.__module__ if isinstance(callee, _Intrinsic) else None
            if module is not None and module != kernels.__name__:
                foreign.add(f"{name} -> {module}.{ref}")
    assert foreign <= {f"{n} -> pyg_dist.sampler._sample_kernels.prefetch"
                       for n in ("_bounds", "labor_fill", "gather_drawn")}, foreign
