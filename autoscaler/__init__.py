"""Ember autoscaler."""
