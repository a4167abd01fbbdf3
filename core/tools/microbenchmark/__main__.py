"""``python -m ember.tools.microbenchmark``."""

import sys

from .main import main

sys.exit(main())
