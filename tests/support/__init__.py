"""Test machinery shared by the tests and the benchmarks; not part of the installed
package (the wheel holds ``pyg_dist`` only).

- :mod:`tests.support.scripts`: runs a script on k ranks forked from a warm fork server,
  as ``torchrun`` would;
- :mod:`tests.support.instrument`: runs a training script with faults (kill a rank at a
  batch or in a save) and figures (loader wait, checkpoint sizes, memory) from outside;
- :mod:`tests.support.netns`: emulated machines (network namespaces, rate-limited links);
- :mod:`tests.support.pyg_lib_reference`: a plain-Python stand-in for pyg-lib's sampler;
- :mod:`tests.support.pyg_prep`: label and split files as PyG's partition script writes;
- :mod:`tests.support.kill_at_phase`: runs a command with a SIGKILL at a named phase of a
  writer (partitioner, export); :mod:`tests.support.export_rows` and
  :mod:`tests.support.leave_early` are the user scripts such tests run;
- :mod:`tests.support.spawn_guard`, :mod:`tests.support.spawn_scan`: the ``multiprocess``
  marker rule, checked at run time (an audit hook) and by reading the tests.

What a user's own tests need (k ranks on one host, id-encoded graphs) is public:
:mod:`pyg_dist.testing`. Tests import this package as ``tests.support`` (pytest puts the
repository on ``sys.path``, see ``pythonpath`` in pyproject.toml); benchmarks put the
repository on ``sys.path`` themselves.
"""
