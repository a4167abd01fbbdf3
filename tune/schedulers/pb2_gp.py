"""The Gaussian process behind PB2, in NumPy (no GPy or scikit-learn needed).

Inputs are rows ``[time, reward before, hyperparameters...]`` normalised to [0, 1]; the target
is the reward's change per unit of time, standardised. The kernel is Ray's time-varying
squared exponential (Parker-Holder et al., "Provably Efficient Online Hyperparameter
Optimization with Population-Based Bandits", 2020): a squared exponential over the inputs
times ``(1 - epsilon) ** (|t - t'| / 2)``, so that old observations count for less. Its
lengthscale is chosen by the marginal likelihood over a small grid. The next hyperparameters
maximise GP-UCB, ``mean + kappa * variance`` with ``kappa = sqrt(0.2 + log(0.4 n))``, where the
variance also counts the points other trials are already trying (Desautels et al., 2014)."""

from __future__ import annotations

import numpy as np

EPSILON = 0.1  # the time-varying factor: how fast old observations fade
NOISE = 1e-3  # observation noise (and jitter keeping the matrix positive definite)
LENGTHSCALES = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
CANDIDATES = 1000  # random points the acquisition is evaluated at (plus their refinements)
MAX_POINTS = 1000  # the newest observations kept (the GP's cost grows as n**3)


def normalize(data: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return (data - low) / (high - low + 1e-8)


def standardize(y: np.ndarray) -> np.ndarray:
    return np.clip((y - y.mean()) / (y.std() + 1e-8), -2, 2)


def kernel(a: np.ndarray, b: np.ndarray, lengthscale: float) -> np.ndarray:
    """Column 0 is time: it enters through the fading factor only, not the distance."""
    dist = ((a[:, None, 1:] - b[None, :, 1:]) ** 2).sum(axis=2)
    fade = (1 - EPSILON) ** (np.abs(a[:, None, 0] - b[None, :, 0]) / 2)
    return np.exp(-dist / lengthscale) * fade


class GP:
    def __init__(self, x: np.ndarray, y: np.ndarray, lengthscale: float | None = None) -> None:
        self.x, self.y = x, y
        self.lengthscale = lengthscale or self._best_lengthscale()
        k = kernel(x, x, self.lengthscale) + NOISE * np.eye(len(x))
        self.chol = np.linalg.cholesky(k)
        self.alpha = np.linalg.solve(self.chol.T, np.linalg.solve(self.chol, y))

    def _best_lengthscale(self) -> float:
        best, best_ll = LENGTHSCALES[0], -np.inf
        for ls in LENGTHSCALES:
            k = kernel(self.x, self.x, ls) + NOISE * np.eye(len(self.x))
            try:
                chol = np.linalg.cholesky(k)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, self.y))
            ll = -0.5 * self.y @ alpha - np.log(np.diag(chol)).sum()
            if ll > best_ll:
                best, best_ll = ls, ll
        return best

    def mean(self, x: np.ndarray) -> np.ndarray:
        return kernel(x, self.x, self.lengthscale) @ self.alpha

    def variance(self, x: np.ndarray) -> np.ndarray:
        ks = kernel(x, self.x, self.lengthscale)
        v = np.linalg.solve(self.chol, ks.T)
        return np.maximum(1.0 - (v**2).sum(axis=0), 0.0)


def select(
    x: np.ndarray,
    y: np.ndarray,
    fixed: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    pending: np.ndarray | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """The hyperparameters (within [low, high]) maximising GP-UCB at the fixed ``[time,
    reward]`` of the trial being copied. ``x``: rows of [time, reward, hyperparameters...]
    (raw), ``y``: reward change per time, ``pending``: hyperparameters being tried now."""
    x, y = x[-MAX_POINTS:], y[-MAX_POINTS:]
    f_low, f_high = x[:, :2].min(axis=0), x[:, :2].max(axis=0)
    lows = np.concatenate([f_low, low])
    highs = np.concatenate([f_high, high])
    xn = normalize(x, lows, highs)
    yn = standardize(y)
    fixed_n = normalize(fixed, f_low, f_high)
    gp = GP(xn, yn)
    # The variance model also holds the pending points (their labels do not matter to it).
    var_gp = gp
    if pending is not None and len(pending):
        rows = np.hstack([np.tile(fixed_n, (len(pending), 1)), normalize(pending, low, high)])
        var_gp = GP(
            np.vstack([xn, rows]), np.concatenate([yn, np.zeros(len(rows))]), gp.lengthscale
        )
    kappa = np.sqrt(0.2 + max(0.0, np.log(0.4 * len(xn))))

    def ucb(h: np.ndarray) -> np.ndarray:
        points = np.hstack([np.tile(fixed_n, (len(h), 1)), h])
        return gp.mean(points) + kappa * var_gp.variance(points)

    candidates = rng.uniform(0, 1, size=(CANDIDATES, len(low)))
    scores = ucb(candidates)
    # Refine around the best few: a cheap stand-in for Ray's L-BFGS-B restarts.
    best = candidates[np.argsort(scores)[-10:]]
    local = np.clip(
        np.repeat(best, 20, axis=0) + rng.normal(0, 0.05, (len(best) * 20, len(low))), 0, 1
    )
    candidates = np.vstack([candidates, local])
    scores = np.concatenate([scores, ucb(local)])
    chosen = candidates[int(np.argmax(scores))]
    return np.clip(low + chosen * (high - low), low, high)
