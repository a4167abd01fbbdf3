"""joblib's backend on ``ember.util.multiprocessing.Pool``: each ``Parallel`` call gets a
pool of ``n_jobs`` actors, fed joblib's batches through ``apply_async``.

A large argument that many calls share (the data ``delayed(fit)(X, i)`` passes to every
call) is put in the object store once per ``Parallel`` call instead of being pickled into
every batch; the workers read it back from shared memory.
"""

from __future__ import annotations

import sys
from typing import Any

import ember
from ember.util.multiprocessing import Pool
from joblib._parallel_backends import (
    AutoBatchingMixin,
    FallbackToBackend,
    ParallelBackendBase,
    PoolManagerMixin,
    SequentialBackend,
)
from joblib.parallel import BatchedCalls

# An argument at least this big (sys.getsizeof) goes to the object store once instead of
# into every batch: below it, pickling it again costs less than a put and a read.
_SHARE_BYTES = 100 * 1024
_POOL_ARGS = ("initializer", "initargs", "maxtasksperchild")


class EmberBackend(PoolManagerMixin, AutoBatchingMixin, ParallelBackendBase):
    """joblib's backend on Ember. ``ray_remote_args`` (as Ray names it) are options for the
    pool's actors; ``n_jobs=-1`` is every CPU of the cluster, ``-2`` all but one, ..."""

    supports_retrieve_callback = True  # results arrive through apply_async's callbacks
    supports_sharedmem = False  # the work runs in other processes

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        ray_remote_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **kwargs
        )
        self.ray_remote_args = ray_remote_args
        self._shared: dict[int, tuple[Any, ember.ObjectRef]] = {}

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        if n_jobs < 0:  # joblib's convention, counted on the cluster instead of this host
            return max(_cluster_cpus() + 1 + n_jobs, 1)
        return n_jobs

    def configure(
        self,
        n_jobs: int = 1,
        parallel: Any = None,
        prefer: str | None = None,
        require: str | None = None,
        ray_remote_args: dict[str, Any] | None = None,
        **pool_kwargs: Any,
    ) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:  # as joblib's process backends: one job runs here, with no pool
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        remote_args = ray_remote_args if ray_remote_args is not None else self.ray_remote_args
        # joblib also passes its memory-mapping and process-context settings: they are for
        # its own process pools (large arguments here go through the object store instead).
        pool_args = {k: v for k, v in pool_kwargs.items() if k in _POOL_ARGS}
        self._pool = Pool(processes=n_jobs, ray_remote_args=remote_args, **pool_args)
        self.parallel = parallel
        return n_jobs

    def submit(self, func: Any, callback: Any = None) -> Any:
        if isinstance(func, BatchedCalls):
            func = self._share_large_args(func)
        return super().submit(func, callback)

    def terminate(self) -> None:
        super().terminate()
        self.reset_batch_stats()
        self._shared.clear()

    def _share_large_args(self, calls: BatchedCalls) -> Any:
        refs: dict[int, ember.ObjectRef] = {}
        for _, args, kwargs in calls.items:
            for value in (*args, *kwargs.values()):
                if id(value) in refs or isinstance(value, ember.ObjectRef):
                    continue
                if sys.getsizeof(value) >= _SHARE_BYTES:
                    if id(value) not in self._shared:
                        # The value is kept with its ref: its id must not be reused while cached.
                        self._shared[id(value)] = (value, ember.put(value))
                    refs[id(value)] = self._shared[id(value)][1]
        if not refs:
            return calls
        calls.items = [
            (f, [_swap(a, refs) for a in args], {k: _swap(v, refs) for k, v in kw.items()})
            for f, args, kw in calls.items
        ]
        return _SharedArgsCalls(calls)


class _Shared:
    """An argument left in the object store: the worker reads it back before the call."""

    __slots__ = ("ref",)

    def __init__(self, ref: ember.ObjectRef) -> None:
        self.ref = ref


def _swap(value: Any, refs: dict[int, ember.ObjectRef]) -> Any:
    ref = refs.get(id(value))
    return value if ref is None else _Shared(ref)


class _SharedArgsCalls:
    """A joblib batch whose large arguments travel as object refs (see the module doc)."""

    def __init__(self, calls: BatchedCalls) -> None:
        self.calls = calls

    def __len__(self) -> int:
        return len(self.calls)

    def __call__(self) -> list[Any]:
        self.calls.items = [
            (f, [_read(a) for a in args], {k: _read(v) for k, v in kw.items()})
            for f, args, kw in self.calls.items
        ]
        return self.calls()


def _read(value: Any) -> Any:
    return ember.get(value.ref) if isinstance(value, _Shared) else value


def _cluster_cpus() -> int:
    """The cluster's CPUs, joining (EMBER_ADDRESS/RAY_ADDRESS) or starting Ember if needed,
    as Ray's backend does for ``n_jobs=-1``."""
    if not ember.is_initialized():
        ember.init()
    return int(ember.cluster_resources().get("CPU", 1))
