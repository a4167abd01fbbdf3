"""``python -m ember.tools.chaos``."""

import sys

from .main import main

sys.exit(main())
