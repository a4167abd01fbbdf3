"""The node's logging level (``ember.init(logging_level=...)``) reaches a process's "ember"
logger, and setting the level it already has leaves every logger's cache alone (a forked
worker would otherwise write to the pages of all the zygote's loggers)."""

from __future__ import annotations

import logging

import pytest
from ember import config


@pytest.fixture
def ember_logger():
    log = logging.getLogger("ember")
    saved = log.level
    yield log
    log.setLevel(saved)


def test_the_level_is_set_once_and_not_again(monkeypatch, ember_logger):
    monkeypatch.setattr(config, "logging_level", "info")
    ember_logger.setLevel(logging.NOTSET)
    config.apply_logging_level()
    assert ember_logger.level == logging.INFO
    other = logging.getLogger("ember.test_logging_level")
    assert other.isEnabledFor(logging.INFO)  # fills its cache
    assert other._cache
    config.apply_logging_level()  # the same level: no cache cleared
    assert other._cache
    monkeypatch.setattr(config, "logging_level", "10")  # a number: DEBUG
    config.apply_logging_level()
    assert ember_logger.level == logging.DEBUG
    assert not other._cache, "a new level clears the caches, as setLevel does"


def test_no_level_given_changes_nothing(monkeypatch, ember_logger):
    monkeypatch.setattr(config, "logging_level", "")
    ember_logger.setLevel(logging.WARNING)
    config.apply_logging_level()
    assert ember_logger.level == logging.WARNING
