"""Scalar curves whose flags are known: the story's (loss ~19 against ln 32 000 = 10.37, accuracy at
chance) on SpecForge's default log interval, with fixed wall times.
"""

from __future__ import annotations

import numpy as np

T0 = 1_700_000_000.0  # wall time of step 0; step s is written at T0 + s seconds
STEPS = np.arange(0, 2050, 50)  # SpecForge's default log interval, 41 points


def story_series(seed: int = 252) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = len(STEPS)
    plosses = [rng.uniform(18.0, 20.0, n) + i * 0.3 for i in range(7)]
    series = {f"train/ploss_{i}": p for i, p in enumerate(plosses)}
    series.update({f"train/acc_{i}": rng.uniform(0.02, 0.07, n) / (i + 1) for i in range(7)})
    series["train/loss"] = np.sum([0.8**i * p for i, p in enumerate(plosses)], axis=0)  # SpecForge main's total
    series["train/lr"] = np.full(n, 1e-4)
    return series
