"""The metrics of activation patching, each a number of the answer position's logits z (float64).

logit-diff   z[answer] - z[wrong]
prob         p[answer],  p = Softmax(z)
kl           KL(p_clean || p) = sum_t p_clean[t] (log p_clean[t] - log p[t])   (the clean run's is 0)
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.pipeline.patch.names import METRICS as METRICS


def log_softmax(z):  # [V] -> [V]: z - max - log sum exp(z - max), stable
    z = np.asarray(z, dtype=np.float64)
    s = z - z.max()
    return s - np.log(np.exp(s).sum())


class Metric:
    """metric(z) -> float for one of METRICS; kl measures against the clean run's logits z_clean."""

    def __init__(self, name: str, answer: int, wrong: int | None, z_clean):
        self.name, self.answer, self.wrong = name, answer, wrong
        self.log_p_clean = log_softmax(z_clean) if name == "kl" else None

    def __call__(self, z) -> float:
        if self.name == "logit-diff":
            return float(z[self.answer] - z[self.wrong])
        lp = log_softmax(z)
        if self.name == "prob":
            return float(np.exp(lp[self.answer]))
        ref = self.log_p_clean
        return float(np.sum(np.exp(ref) * (ref - lp)))


def of_both_runs(name: str, answer: int, wrong: int | None, z_clean, z_corrupted, texts: str, differ: str):
    """The Metric and its value on the clean and the corrupted run's logits -> (metric, clean, corrupted); refused
    when the two are equal (no patch could recover anything). texts: what the runs read ("prompts", "sources")."""
    score = Metric(name, answer, wrong, z_clean)
    clean, corrupted = score(z_clean), score(z_corrupted)
    if not abs(clean - corrupted) > 1e-12 * max(1.0, abs(clean)):
        raise QkvError(f"the clean and corrupted {texts} give the same {name} ({clean:.6g}): there is nothing to "
                       f"recover; choose {texts} whose {differ}")  # fmt: skip
    return score, clean, corrupted
