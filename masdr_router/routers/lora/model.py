"""The R2-Routed classifier: a transformer encoder (with LoRA adapters while training), pooled, and
a linear head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class RouterModel(nn.Module):
    """``encoder -> pool (mean over tokens, or [CLS]) -> dropout -> linear -> logits``.

    During training ``encoder`` is a peft model with LoRA adapters; in an exported artifact it is
    the plain encoder with the adapters merged in, which is faster to serve and needs no peft.
    """

    def __init__(self, encoder: nn.Module, n_labels: int, *, pooling: str = "mean", head_dropout: float = 0.1,
                 hidden_size: int | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
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

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.pool_hidden(hidden, mask, self.pooling)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw: Any) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
        return self.head(self.dropout(self.pool(hidden, attention_mask).float()))
