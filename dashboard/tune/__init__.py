"""The dashboard's Tune view: experiments published in the GCS KV by ``ember.tune``'s
driver (``store.py``) and their REST API (``routes.py``)."""
