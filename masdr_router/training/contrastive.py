"""A SetFit-style contrastive stage: before the head is fitted, tune the encoder's adapters so that
queries of one scope embed close together and queries of different scopes apart.

Why: with 8-64 queries per scope the classification loss alone moves the encoder little, and the
head starts from a probe on features that were never shaped for this taxonomy. SetFit (Tunstall et
al. 2022) fixes that with pairs: each query is paired with one of its own scope (target cosine 1)
and one of another (target 0), and a cosine-similarity loss reshapes the embedding space. From n
queries it makes 2n pairs per iteration, far more training signal than n labels. On the learning
curves (``bench/learning_curve.py``) SetFit beat the plain LP-FT router at these sizes; here the
same stage runs through the router's own LoRA adapters, so the artifact is unchanged: the adapters
the stage tuned are the ones classification fine-tuning continues from and the export merges.

It works on the already tokenised training rows (:class:`~masdr_router.training.trainer.Encoded`),
so pairs are index pairs and nothing is tokenised twice.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from ..routers.lora.model import RouterModel


def sample_pairs(labels: np.ndarray, iterations: int, rng: np.random.Generator) -> np.ndarray:
    """``(anchor, other, target)`` rows: per iteration and query, one pair with a query of its own
    scope (target 1) and one with a query of another scope (target 0), shuffled. A scope with a
    single query pairs it with itself; with one scope only there are no negatives.

    >>> p = sample_pairs(np.array([0, 0, 1, 1, 2]), 2, np.random.default_rng(0))
    >>> p.shape, int(p[:, 2].sum())
    ((20, 3), 10)
    >>> y = np.array([0, 0, 1, 1, 2]); bool(all((y[a] == y[b]) == t for a, b, t in p))
    True
    """
    by = {int(k): np.flatnonzero(labels == k) for k in np.unique(labels)}
    rows = []
    for _ in range(iterations):
        for i, y in enumerate(labels):
            rows.append((i, int(rng.choice(by[int(y)])), 1))
            others = [k for k in by if k != int(y)]
            if others:
                rows.append((i, int(rng.choice(by[int(rng.choice(others))])), 0))
    out = np.array(rows, dtype=np.int64).reshape(-1, 3)
    rng.shuffle(out)
    return out


def pooled(model: RouterModel, ids: torch.Tensor, mask: torch.Tensor, device: Any) -> torch.Tensor:
    """The encoder's pooled features for padded rows, the padding they all share trimmed first
    (queries are short and padded to max_length)."""
    from ..routers.lora.model import RouterModel

    width = int(mask.sum(1).max())
    m = mask[:, :width].to(device)
    out = model.encoder(input_ids=ids[:, :width].to(device), attention_mask=m)
    return RouterModel.pool_outputs(out, m, model.pooling).float()


def contrastive_stage(model: RouterModel, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, *,
                      iterations: int, learning_rate: float, batch_size: int, max_steps: int, seed: int,
                      device: Any, autocast: Any) -> dict[str, float]:
    """Tune ``model.encoder``'s trainable parameters (the LoRA adapters) on sampled pairs with a
    cosine-similarity (MSE) loss, at most ``max_steps`` batches of ``batch_size`` pairs. Returns the
    number of steps and the mean loss of the first and last tenth of them.

    >>> contrastive_stage(model, enc.ids, enc.mask, enc.y, iterations=20, learning_rate=1e-4,   # doctest: +SKIP
    ...                   batch_size=32, max_steps=600, seed=0, device="cpu", autocast=contextlib.nullcontext)
    {'contrastive_steps': 50, 'contrastive_loss_first': 0.21, 'contrastive_loss_last': 0.04}
    """
    import torch

    pairs = sample_pairs(labels.numpy(), iterations, np.random.default_rng(seed))
    steps = min(max_steps, math.ceil(len(pairs) / batch_size))
    if steps == 0 or not (pairs[:, 2] == 0).any():
        return {"contrastive_steps": 0}
    params = [p for p in model.encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate)
    torch.manual_seed(seed)  # dropout masks
    model.train()
    losses = []
    for s in range(steps):
        batch = torch.from_numpy(pairs[s * batch_size:(s + 1) * batch_size])
        # one forward pass over the batch's distinct queries: with few queries a batch of 32 pairs
        # names each of them about twice, and the encoder is nearly all of a step's cost
        rows, where = torch.unique(batch[:, :2], return_inverse=True)
        with autocast():
            emb = pooled(model, ids[rows], mask[rows], device)
        cos = torch.nn.functional.cosine_similarity(emb[where[:, 0]], emb[where[:, 1]])
        loss = torch.nn.functional.mse_loss(cos, batch[:, 2].float().to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    tenth = max(1, steps // 10)
    return {"contrastive_steps": steps, "contrastive_loss_first": float(np.mean(losses[:tenth])),
            "contrastive_loss_last": float(np.mean(losses[-tenth:]))}


def tuned_features(model: RouterModel, ids: torch.Tensor, mask: torch.Tensor, *, device: Any,
                   batch_size: int = 256) -> np.ndarray:
    """Pooled features of the (tuned) encoder for already tokenised rows: the probe's input after
    the contrastive stage."""
    import torch

    model.eval()
    out = []
    with torch.inference_mode():
        for i in range(0, len(ids), batch_size):
            out.append(pooled(model, ids[i:i + batch_size], mask[i:i + batch_size], device).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.head.in_features), np.float32)
