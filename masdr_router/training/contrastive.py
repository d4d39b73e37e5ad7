"""A SetFit-style contrastive stage: before the head is fitted, tune the encoder so that queries
of one scope embed close together and queries of different scopes apart.

Why: with 8-64 queries per scope the classification loss alone moves the encoder little, and the
head starts from a probe on features that were never shaped for this taxonomy. SetFit (Tunstall et
al. 2022) fixes that with pairs: each query is paired with one of its own scope (target cosine 1)
and one of another (target 0), and a cosine-similarity loss reshapes the embedding space. From n
queries it makes 2n pairs per iteration, far more training signal than n labels. On the learning
curves (``bench/learning_curve.py``) SetFit beat the plain LP-FT router at these sizes.

By default the stage tunes every weight of the base encoder, as SetFit does: at 8 and 16 queries
per scope on BBC, composite and SQLAlchemy the probe on the tuned encoder scored 0.012-0.058
macro-F1 higher than after tuning the LoRA adapters alone (``bench/contrastive_stage.py``). The
LoRA adapters, still at their zero start, then carry classification fine-tuning, and the export
merges them into the tuned encoder. ``weights="lora"`` tunes the adapters instead, leaving the
base as published.

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
    """``(anchor, other, target)`` rows, SetFit's way: every unordered pair of queries (a query with
    itself included) in a shuffled order, split into same-scope (target 1) and other-scope (target
    0) pairs, each list cycled to ``iterations`` x n pairs and the two interleaved. Cycling through
    all the pairs before repeating one covers the data evenly; drawing partners at random instead
    lost 0.015-0.02 macro-F1 on composite at 8 per scope (two seeds). With one scope only there are no
    negatives (and no rows of target 0).

    >>> p = sample_pairs(np.array([0, 0, 1, 1, 2]), 2, np.random.default_rng(0))
    >>> p.shape, int(p[:, 2].sum())
    ((20, 3), 10)
    >>> y = np.array([0, 0, 1, 1, 2]); bool(all((y[a] == y[b]) == t for a, b, t in p))
    True
    """
    n = len(labels)
    pairs = np.stack(np.triu_indices(n), axis=-1)
    pairs = pairs[rng.permutation(len(pairs))]
    same = labels[pairs[:, 0]] == labels[pairs[:, 1]]
    k = iterations * n
    lists = [np.column_stack([part[np.arange(k) % len(part)], np.full(k, target)])
             for part, target in ((pairs[same], 1), (pairs[~same], 0)) if len(part)]
    out = np.empty((sum(len(x) for x in lists), 3), dtype=np.int64)
    if len(lists) == 2:
        out[0::2], out[1::2] = lists
    elif lists:
        out[:] = lists[0]
    return out


def pooled(model: RouterModel, ids: torch.Tensor, mask: torch.Tensor, device: Any) -> torch.Tensor:
    """The encoder's pooled features for padded rows, the padding they all share trimmed first
    (queries are short and padded to max_length)."""
    from ..routers.lora.model import RouterModel

    width = int(mask.sum(1).max())
    m = mask[:, :width].to(device)
    out = model.encoder(input_ids=ids[:, :width].to(device), attention_mask=m)
    return RouterModel.pool_outputs(out, m, model.pooling).float()


def stage_parameters(encoder: Any, weights: str) -> list[torch.nn.Parameter]:
    """What the stage tunes: ``"lora"``, the encoder's trainable parameters (the adapters of a peft
    model); ``"all"``, every weight of the base encoder, the adapters excluded (they start from zero
    for classification fine-tuning), as SetFit tunes its body."""
    if weights == "lora":
        return [p for p in encoder.parameters() if p.requires_grad]
    if weights == "all":
        return [p for n, p in encoder.named_parameters() if "lora_" not in n]
    raise ValueError(f"weights must be 'lora' or 'all', got {weights!r}")


def contrastive_stage(model: RouterModel, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, *,
                      iterations: int, learning_rate: float, batch_size: int, max_steps: int, seed: int,
                      device: Any, autocast: Any, weights: str = "lora") -> dict[str, Any]:
    """Tune ``model.encoder``'s ``weights`` (:func:`stage_parameters`) on sampled pairs with a
    cosine-similarity (MSE) loss, at most ``max_steps`` batches of ``batch_size`` pairs, the learning
    rate warmed up over the first tenth of them and decayed linearly to zero. Returns the number of
    steps and the mean loss of the first and last tenth of them.

    >>> contrastive_stage(model, enc.ids, enc.mask, enc.y, iterations=20, learning_rate=1e-4,   # doctest: +SKIP
    ...                   batch_size=32, max_steps=600, seed=0, device="cpu", autocast=contextlib.nullcontext)
    {'contrastive_steps': 50, 'contrastive_loss_first': 0.21, 'contrastive_loss_last': 0.04}
    """
    import torch

    pairs = sample_pairs(labels.numpy(), iterations, np.random.default_rng(seed))
    steps = min(max_steps, math.ceil(len(pairs) / batch_size))
    if steps == 0 or not (pairs[:, 2] == 0).any():
        return {"contrastive_steps": 0}
    from .schedule import lr_at

    params = stage_parameters(model.encoder, weights)
    tuned = {id(p) for p in params}
    was = {p: p.requires_grad for p in model.encoder.parameters()}
    for p in was:  # gradients for what the stage tunes, and for nothing else
        p.requires_grad_(id(p) in tuned)
    optimizer = torch.optim.AdamW(params, lr=learning_rate)
    torch.manual_seed(seed)  # dropout masks
    model.train()
    losses = []
    warmup = max(1, steps // 10)
    for s in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(s, steps, warmup, learning_rate)
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
    for p, w in was.items():  # as it was: the base encoder frozen again for classification fine-tuning
        p.requires_grad_(w)
        p.grad = None  # the last step's gradients must not leak into the first step of classification
    tenth = max(1, steps // 10)
    return {"contrastive_steps": steps, "contrastive_weights": weights,
            "contrastive_loss_first": float(np.mean(losses[:tenth])),
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
