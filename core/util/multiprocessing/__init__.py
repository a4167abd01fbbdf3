"""``ember.util.multiprocessing``: ``multiprocessing.Pool`` on Ember's actors, so a pool can
span a cluster (Ray's ``ray.util.multiprocessing``). ``TimeoutError`` and ``JoinableQueue``
are the standard library's, re-exported here as Ray does."""

from multiprocessing import JoinableQueue, TimeoutError

from ember.util.multiprocessing.pool import Pool
from ember.util.multiprocessing.results import AsyncResult, IMapIterator, PoolTaskError

__all__ = ["AsyncResult", "IMapIterator", "JoinableQueue", "Pool", "PoolTaskError", "TimeoutError"]
