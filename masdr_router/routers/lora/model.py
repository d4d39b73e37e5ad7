"""The R2-Routed classifier: a transformer encoder (with LoRA adapters while training), pooled, and
a linear head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class RouterModel(nn.Module):
    """``encoder -> pool (mean over tokens, or [CLS]) -> [L2-normalise] -> dropout -> linear -> logits``.

    During training ``encoder`` is a peft model with LoRA adapters; in an exported artifact it is
    the plain encoder with the adapters merged in, which is faster to serve and needs no peft.
    ``normalize`` puts the head on unit-length features, the sentence embeddings themselves.
    """

    def __init__(self, encoder: nn.Module, n_labels: int, *, pooling: str = "mean", head_dropout: float = 0.1,
                 hidden_size: int | None = None, normalize: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = normalize
        hidden = hidden_size or int(encoder.config.hidden_size)
        self.dropout = nn.Dropout(head_dropout)
        self.head = nn.Linear(hidden, n_labels)

    @staticmethod
    def pool_hidden(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
        """Mean over the attended tokens, or the first ([CLS]) token."""
        if pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)

    @staticmethod
    def pool_outputs(outputs: Any, mask: torch.Tensor, pooling: str) -> torch.Tensor:
        """The features the head sees: ``pooler`` is the encoder's own pooler (BERT: dense + tanh
        over [CLS]), the head of the standard ``*ForSequenceClassification`` models; otherwise
        :meth:`pool_hidden` over the last hidden states."""
        if pooling == "pooler":
            pooled = getattr(outputs, "pooler_output", None)
            if pooled is None:
                raise ValueError("pooling 'pooler' needs an encoder with a pooler (BERT-family models have one)")
            return pooled
        return RouterModel.pool_hidden(outputs.last_hidden_state, mask, pooling)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw: Any) -> torch.Tensor:
        outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw)
        features = self.pool_outputs(outputs, attention_mask, self.pooling).float()
        if self.normalize:
            features = nn.functional.normalize(features, dim=-1)
        return self.head(self.dropout(features))
