"""``@ember.remote`` on a function: ``f.remote(...)`` submits a task and returns refs."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from ember import global_state, options
from ember.call_signature import arity_of, check_call, params_of
from ember.core_worker.task_spec import TaskSpec
from ember.driver import current_worker
from ember.ids import new_task_id
from ember.object_ref_generator import check_generator_returns, generator_mode, submit_generator
from ember.runtime_env import inherited_env
from ember.serialization import dumps_function
from ember.util.placement_group import captured_strategy

# Ray's default for remote functions: a task is retried up to 4 times if its worker dies.
DEFAULT_MAX_RETRIES = 4


class RemoteFunction(options.OlderRemoteSpelling):
    def __init__(self, function: Any, opts: dict[str, Any]) -> None:
        self._function = function
        self._name = f"{function.__module__}.{function.__qualname__}"
        # What its tasks are called where users read them (get_task_name, the state API,
        # pages, timeline, errors), as Ray names them: the function's own name, without its
        # module or the functions it is nested in.
        self._task_name = function.__name__
        self._opts = options.validate(opts, options.TASK_OPTIONS, f"remote function {self._name}")
        # A generator function's tasks stream their items unless num_returns says otherwise.
        self._is_generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(
            function
        )
        check_generator_returns(self._opts.get("num_returns"), self._is_generator, self._name)
        self._params = params_of(function)
        self._arity = arity_of(self._params)
        self._pickled: bytes | None = None
        self._function_id: bytes | None = None
        self._registered_with: Any = None
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", "remote_function")
        self.__wrapped__ = function

    def __getstate__(self) -> dict[str, Any]:
        # Another task's closure may capture this function: ship what it is, not the process
        # state of whoever used it last.
        state = dict(self.__dict__)
        state["_registered_with"] = None
        return state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Remote functions cannot be called directly. Instead of running "
            f"'{self._name}()', try '{self._name}.remote()'."
        )

    def options(self, **opts: Any) -> _BoundOptions:
        merged = {
            **self._opts,
            **options.validate(opts, options.TASK_OPTIONS, self._name, in_options=True),
        }
        check_generator_returns(merged.get("num_returns"), self._is_generator, self._name)
        return _BoundOptions(self, merged)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._submit(args, kwargs, self._opts)

    def _ensure_exported(self, worker: Any) -> None:
        if self._pickled is None:
            self._pickled = dumps_function(self._function)
            self._function_id = hashlib.sha1(self._pickled).digest()[:16]
        if self._registered_with is not worker:
            worker.register_function(self._function_id, self._pickled)
            self._registered_with = worker

    def _submit(self, args: tuple, kwargs: dict, opts: dict) -> Any:
        worker = global_state.worker  # read inline: this is the hot path of every .remote()
        if worker is None:
            worker = current_worker()
        check_call(self._params, self._arity, args, kwargs, self._task_name)
        if worker.local_mode:
            return worker.run_local(self._function, args, kwargs, opts)
        self._ensure_exported(worker)
        num_returns = opts.get("num_returns", 1)
        generator = 0
        if self._is_generator:
            num_returns, generator = generator_mode(opts.get("num_returns"))
        encoded, kw_names, nested = worker.encode_args(args, kwargs, self._name)
        spec = TaskSpec(
            task_id=new_task_id(),
            function_id=self._function_id,
            function_name=self._task_name,
            resources=options.resource_shape(opts, 1),
            max_retries=opts.get("max_retries", DEFAULT_MAX_RETRIES),
        )
        spec.set_optional(
            encoded, kw_names, num_returns, nested, opts.get("name"), opts.get("retry_exceptions")
        )
        strategy = options.scheduling_strategy(opts) or captured_strategy(worker)
        if strategy is not None:
            spec.strategy = strategy
        if opts.get("max_calls"):
            spec.actor_options = {"max_calls": opts["max_calls"]}
        env = inherited_env(worker, opts.get("runtime_env"))
        if env:
            spec.runtime_env = env
        if generator:
            spec.generator = generator
            return submit_generator(worker, spec, worker.submit_task)
        refs = worker.submit_task(spec)
        if num_returns == 1:
            return refs[0]
        return refs if num_returns != 0 else None


class _BoundOptions:
    def __init__(self, fn: RemoteFunction, opts: dict[str, Any]) -> None:
        self._fn = fn
        self._opts = opts

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn._submit(args, kwargs, self._opts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._fn(*args, **kwargs)
