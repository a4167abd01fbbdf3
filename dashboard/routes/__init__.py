"""One router per feature (issue 4 §2); ``ember.dashboard.routers.ROUTERS`` mounts them."""
