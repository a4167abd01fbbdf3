"""The dashboard's Serve module: Ray Serve's REST API (``/api/serve/applications/``) over the
Serve controller's records in the GCS KV. It does not import ``ember.serve`` (the import layers
keep libraries above the dashboard's reach); see ``routes.py`` for the request record."""
