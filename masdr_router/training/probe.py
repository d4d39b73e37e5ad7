"""The linear probe: logistic regression on the frozen encoder's pooled features.

It is two things in training. A baseline the fine-tuned router must beat (with little data a
frozen probe is often the better model, and the guard keeps it then), and the head's starting
point for LoRA fine-tuning (LP-FT, Kumar et al. 2022: fine-tuning from a fitted head instead of a
random one distorts the pretrained features less, which matters most with few examples). Because
LoRA's B matrices start at zero, a model whose head is the probe *is* the probe at step 0.

Its features are the L2-normalised sentence embeddings by default (SetFit's head sees the same).
On 5 data sets x 5 sizes (8 to all queries per scope, 3 samples each below all) logistic
regression on them beat the same regression on standardised features at every size on average
(mean macro-F1 +0.033 at 8 per scope, +0.015 at 16, +0.020 at 32, +0.010 at 64, +0.008 at all), and
in 22 of the 25 cells (it lost on Django docs at 64 and all, and by 0.001 on 20 Newsgroups at 64;
``bench/probe_features.py``).
Standardised features are kept for the ``pooler`` head, whose standard transformers classifier
cannot normalise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The regression's C on unit-length features. Fixed, not cross-validated: with 8-16 queries per scope
# a 3-fold choice of C is noise (it lost 0.002-0.004 on average to the fixed C there), and since C
# weighs the sum of the losses a fixed C already regularises less as data grows. 3 was the best of
# 1, 3 and 10 on average at every size but 8 per scope, where it tied with 1.
NORMALIZED_C = 3.0


@dataclass
class LinearProbe:
    """``logits = features @ weight.T + bias`` over raw pooled features (standardisation folded in),
    or over the L2-normalised features when ``normalize``."""

    weight: np.ndarray  # (n_labels, hidden)
    bias: np.ndarray  # (n_labels,)
    C: float  # the regression's inverse regularisation (0 for the centroid head, which has none)
    normalize: bool = False

    def logits(self, features: np.ndarray) -> np.ndarray:
        if self.normalize:
            features = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
        return features @ self.weight.T + self.bias


def pooled_features(encoder: Any, tokenizer: Any, texts: Sequence[str], *, max_length: int, pooling: str,
                    batch_size: int = 64) -> np.ndarray:
    """Pooled last hidden states of a frozen encoder, pooled exactly as the router's head sees them."""
    import torch

    from ..routers.lora.model import RouterModel

    out = []
    encoder.eval()
    device = next(encoder.parameters()).device
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt").to(device)
            outputs = encoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
            out.append(RouterModel.pool_outputs(outputs, enc["attention_mask"], pooling).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, int(encoder.config.hidden_size)), np.float32)


def fit_probe(features: np.ndarray, labels: np.ndarray, n_labels: int, *, balanced: bool = True,
              seed: int = 0, sample_weight: np.ndarray | None = None, normalize: bool = True,
              C: float | None = None) -> LinearProbe:
    """Multinomial logistic regression: on the L2-normalised features with ``C`` (default
    ``NORMALIZED_C``) when ``normalize``, or on standardised features with C chosen by 3-fold
    cross-validation when every class has 3 examples (else C = 1). A label with no example gets a
    zero row and a bias far below the others, so the probe never predicts it.

    >>> rng = np.random.default_rng(0)
    >>> x = np.concatenate([rng.normal(-1, 1, (20, 4)), rng.normal(1, 1, (20, 4))]); y = np.repeat([0, 2], 20)
    >>> p = fit_probe(x, y, 3)
    >>> bool((p.logits(x).argmax(1) == y).mean() > 0.8), bool(p.logits(x)[:, 1].max() < p.logits(x).max(1).min())
    (True, True)
    >>> bool((fit_probe(x, y, 3, normalize=False).logits(x).argmax(1) == y).mean() > 0.8)
    True
    >>> bool(abs(fit_probe(x, y, 3, C=0.1).weight).max() < abs(fit_probe(x, y, 3, C=10.0).weight).max())
    True
    """
    import warnings

    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    if normalize:
        mu, sigma = np.zeros(features.shape[1]), np.ones(features.shape[1])
        z = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
    else:
        mu, sigma = features.mean(0), features.std(0) + 1e-6
        z = (features - mu) / sigma
    present = np.unique(labels)
    counts = np.bincount(labels, minlength=n_labels)[present]
    weight = "balanced" if balanced else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on tiny data; the result is still the optimum found
        if len(present) < 2:
            coef, intercept, c = np.zeros((1, features.shape[1])), np.zeros(1), 1.0
        elif normalize:
            c = NORMALIZED_C if C is None else C
            clf = LogisticRegression(C=c, class_weight=weight, max_iter=3000).fit(z, labels,
                                                                                  sample_weight=sample_weight)
            coef, intercept = clf.coef_, clf.intercept_
        elif counts.min() >= 3:
            clf = LogisticRegressionCV(Cs=[0.01, 0.03, 0.1, 0.3, 1.0], cv=3, class_weight=weight, max_iter=2000,
                                       random_state=seed).fit(z, labels, sample_weight=sample_weight)
            coef, intercept, c = clf.coef_, clf.intercept_, float(np.ravel(clf.C_)[0])
        else:
            clf = LogisticRegression(C=1.0, class_weight=weight, max_iter=2000).fit(z, labels,
                                                                                     sample_weight=sample_weight)
            coef, intercept, c = clf.coef_, clf.intercept_, 1.0
    if len(present) == 2:  # sklearn keeps one row for two classes: logit for class 1 vs 0
        coef = np.stack([-coef[0] / 2, coef[0] / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    w = np.zeros((n_labels, features.shape[1]))
    b = np.full(n_labels, -1e4 if len(present) < n_labels else 0.0)
    w[present] = coef / sigma
    b[present] = intercept - (coef / sigma) @ mu
    return LinearProbe(weight=w.astype(np.float32), bias=b.astype(np.float32), C=c, normalize=normalize)


# Cosine logits of about this size: the calibration's temperature (clipped to [0.05, 20]) then has
# room on both sides whatever the encoder's feature norms are.
CENTROID_LOGIT_SCALE = 20.0


def fit_centroid(features: np.ndarray, labels: np.ndarray, n_labels: int) -> LinearProbe:
    """The nearest-centroid classifier (cosine to each scope's mean normalised feature) as a linear
    head on raw pooled features. The argmax of ``x . c`` equals that of ``x/|x| . c``, so a linear layer
    over raw features predicts exactly the cosine nearest centroid; the weights are scaled by the mean
    feature norm so the logits are ``CENTROID_LOGIT_SCALE`` times a cosine, on average. A label with no
    example is never predicted.

    >>> x = np.array([[2., 0.], [3., .1], [0., 1.], [.1, 2.]]); y = np.array([0, 0, 2, 2])
    >>> fit_centroid(x, y, 3).logits(x).argmax(1).tolist()
    [0, 0, 2, 2]
    """
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    unit = features / np.maximum(norms, 1e-9)
    w = np.zeros((n_labels, features.shape[1]))
    b = np.full(n_labels, -1e4)
    for c in np.unique(labels):
        mean = unit[labels == c].mean(0)
        w[c] = mean / max(float(np.linalg.norm(mean)), 1e-9)
        b[c] = 0.0
    w *= CENTROID_LOGIT_SCALE / max(float(norms.mean()), 1e-9)
    return LinearProbe(weight=w.astype(np.float32), bias=b.astype(np.float32), C=0.0)
