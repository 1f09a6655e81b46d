"""The HiSparse engine model (SGLang 0.5.23): one owner for every serving fact.

Light to import (each module imports only what it uses; nothing is imported here), so the
``sactool_cxl`` plug-in can use it inside every SGLang scheduler process.

* :mod:`~sactool.hisparse.layout`    — KV record bytes and dtypes, indexer key bytes, the
  config.json fields a DSA model needs;
* :mod:`~sactool.hisparse.capacity`  — device slots, host-pool and GPU bytes of one rank;
* :mod:`~sactool.hisparse.engine`    — SGLang's fixed facts: the DSA page, swap-in CTA widths,
  the settings the engine decides, the tested SGLang range;
* :mod:`~sactool.hisparse.hotbuffer` — exact simulation of the per-request LRU hot buffer;
* :mod:`~sactool.hisparse.cost`      — fetch bytes and time per decode step;
* :mod:`~sactool.hisparse.gpus`      — GPU catalog and the per-GPU KV budget.

Consumers: ``tune/`` (search over these), ``serve/`` (launch checks), ``simulate/`` (serving
model), the pool (:mod:`sactool.pool`) and the plug-in (:mod:`sactool.plugins.sglang`). Where the
host pool goes — targets, the rank rule and slices, capacity, the placer — is :mod:`sactool.pool`;
how large a profile's pool is per rank is :mod:`sactool.profile.sizing` (this package never
imports a profile).
"""

#: HiSparse swap-in kernel versions whose LRU write-back differs (``hotbuffer``, "Kernel version"):
#: SGLang 0.5.23's, and the SAC authors' fork's (the kernel behind their logged runs).
KERNELS = ("sglang-0.5.23", "sac-fork")
