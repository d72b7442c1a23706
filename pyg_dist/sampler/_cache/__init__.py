"""The feature cache: the remote node rows a trainer is most likely to fetch, held once
per machine.

- :mod:`.feature_cache`: which rows (the most referenced halo nodes, within a budget),
  and lookups (:class:`~pyg_dist.sampler._cache.feature_cache.FeatureCache`);
- :mod:`.shared`: one copy per machine, built by the first trainer and mapped by the
  others and every sampler worker;
- :mod:`.file`: the file that copy lives in, its digest and its locks.
"""
