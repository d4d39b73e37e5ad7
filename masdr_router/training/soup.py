"""Averaging the weights of the cross-validation fold models and the refit (a uniform model soup).

In the few-shot case the folds train the same recipe for the same number of epochs as the refit,
each on two thirds of the queries: models that started from the same pretrained encoder and differ
by which queries they saw and by their seeds' noise. Their uniform weight average (Wortsman et al.
2022, "Model soups") keeps one model's serving cost and averages away part of that noise, which at
a few queries per scope is the larger part of the error. LoRA's update is a product of two
matrices, so the average is taken over the weights the models compute with, adapters merged in.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from ..routers.lora.model import RouterModel


def effective_state(model: RouterModel) -> dict[str, torch.Tensor]:
    """The weights ``model`` computes with (LoRA adapters merged in), as CPU copies."""
    encoder = model.encoder
    if hasattr(encoder, "merge_and_unload"):
        encoder = copy.deepcopy(encoder).merge_and_unload()
    state = {f"encoder.{k}": v.detach().cpu().clone() for k, v in encoder.state_dict().items()}
    state.update({f"head.{k}": v.detach().cpu().clone() for k, v in model.head.state_dict().items()})
    return state


def souped(model: RouterModel, states: Sequence[dict[str, torch.Tensor]]) -> RouterModel:
    """A copy of ``model`` with a plain (merged) encoder whose weights, like the head's, are the
    uniform average of ``states`` (from :func:`effective_state`); integer buffers are the first's.

    >>> soup = souped(refit, [effective_state(m) for m in (*fold_models, refit)])   # doctest: +SKIP
    """
    if not states:
        raise ValueError("a soup needs at least one model")
    keys = set(states[0])
    if any(set(s) != keys for s in states[1:]):
        raise ValueError("the models to average do not have the same weights")
    encoder = copy.deepcopy(model.encoder)
    if hasattr(encoder, "merge_and_unload"):
        encoder = encoder.merge_and_unload()
    out = RouterModel(encoder, model.head.out_features, pooling=model.pooling, head_dropout=model.dropout.p,
                      hidden_size=model.head.in_features, normalize=model.normalize)
    avg = {}
    for k in states[0]:
        first = states[0][k]
        avg[k] = (torch.stack([s[k].float() for s in states]).mean(0).to(first.dtype)
                  if first.is_floating_point() else first)
    out.load_state_dict(avg)
    device = next(model.parameters()).device
    for p in out.parameters():
        p.requires_grad_(False)
    return out.to(device).eval()
