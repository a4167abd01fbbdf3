"""Ray 0.8's name for the search package (``ray.tune.suggest``), which the seed's Tune programs
import from: the same objects as ``ember.tune.search``. The integrations are its submodules
(``ember.tune.suggest.hyperopt``, ``.optuna``), imported only when named."""

from ember.tune.search import *  # noqa: F403 - the same names, by design
from ember.tune.search import __all__  # noqa: F401
