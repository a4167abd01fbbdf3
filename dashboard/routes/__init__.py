"""One router per feature; ``ember.dashboard.routers.ROUTERS`` mounts them."""
