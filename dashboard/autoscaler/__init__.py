"""The autoscaler as the dashboard reads it: its status record (``record``), the dashboard's
copy and history of it (``view``), ``GET /api/autoscaler/status`` (``routes``) and the
``autoscaler_*`` Prometheus families (``prom``). Nothing here imports ``ember.autoscaler``."""
