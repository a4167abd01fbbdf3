"""Serve's errors (Ray Serve's names, so ``except`` clauses carry over)."""

from __future__ import annotations


class RayServeException(Exception):
    """A Serve error: a bad application, an unknown name, a deploy that failed."""


class BackPressureError(RayServeException):
    """Every replica is at max_ongoing_requests and the wait queue is full or timed out."""

    def __init__(self, deployment: str, queued: int, limit: int, waited_s: float) -> None:
        self.deployment = deployment
        super().__init__(
            f"deployment {deployment} is overloaded: every replica is at its "
            f"max_ongoing_requests and {queued} requests wait (limit {limit}); gave up after "
            f"{waited_s:.1f}s. Add replicas (num_replicas / autoscaling_config) or raise "
            "max_ongoing_requests / max_queued_requests."
        )

    def __reduce__(self):  # the message is built from the fields; pickle the fields
        return (_rebuild_backpressure, (self.args[0],))


def _rebuild_backpressure(message: str) -> BackPressureError:
    e = BackPressureError.__new__(BackPressureError)
    Exception.__init__(e, message)
    return e


class DeploymentUnavailableError(RayServeException):
    """The deployment has no running replica to send the request to."""


class ReplicaDiedError(RayServeException):
    """The replica handling the request died before answering."""


class RequestTimeoutError(RayServeException, TimeoutError):
    """The request did not finish within its timeout."""
