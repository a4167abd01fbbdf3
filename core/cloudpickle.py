"""``ember.cloudpickle``: the cloudpickle Ember pickles functions and classes with, under the
name Ray's programs use (``ray.cloudpickle.dumps(...)``)."""

from cloudpickle import (  # noqa: F401 - re-exported
    CloudPickler,
    Pickler,
    dump,
    dumps,
    load,
    loads,
    register_pickle_by_value,
    unregister_pickle_by_value,
)
