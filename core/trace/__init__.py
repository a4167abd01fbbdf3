"""The timeline: what it keeps beyond the task table (``store``) and the Chrome trace written
from it (``writer``), shared by ``ember.timeline()`` and the dashboard."""
