"""``sactool watch``: the KV pool while the engine serves — where each rank's pool really is against
the plan, how full each target is, what the CXL links carry where a counter exists, and what the
engine asks of the pool against the profile's prediction. :mod:`sactool.watch.api` is the entry.
"""
