"""The KV host pool on this machine, engine-neutral: one home for which targets hold it, which
rank gets which slice, whether it fits, and placing it.

* :mod:`~sactool.pool.targets` — :class:`~sactool.pool.targets.Target` (a NUMA node or DAX
  device with its capacity, align and socket), the targets pool settings name, their facts from a
  topology, and the pool tune finds on a machine (:mod:`~sactool.pool.discover`);
* :mod:`~sactool.pool.readings` — momentary figures (a node's free memory now), apart from the
  probed structure;
* :mod:`~sactool.pool.rankplan` — the one rank-rule table and the one slice rule; the plan;
* :mod:`~sactool.pool.plan` — :class:`~sactool.pool.plan.PoolSpec` (pool settings + world size +
  per-rank byte budget) and what a plug-in does for one rank;
* :mod:`~sactool.pool.capacity` — does the pool fit (``serve --dry-run``);
* :mod:`~sactool.pool.contract` — the environment serve hands the plug-ins;
* :mod:`~sactool.pool.placer` — the allocation, for any engine's hooks.

Imports profile, memory, topology, host and the leaves; never an engine, serve, tune, simulate
(tests/test_boundaries.py). Nothing is imported here.
"""
