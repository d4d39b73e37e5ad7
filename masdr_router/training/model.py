"""The R2-Routed classifier: a transformer encoder with LoRA adapters, pooled, and a linear head."""

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

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw: Any) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
        return self.head(self.dropout(self.pool(hidden, attention_mask).float()))


def build_lora_model(base_path: str, n_labels: int, *, pooling: str, head_dropout: float, lora_r: int,
                     lora_alpha: int, lora_dropout: float, target_modules: list[str]) -> RouterModel:
    """A fresh model: pretrained encoder + new LoRA adapters + a new head (seed torch first)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    base = AutoModel.from_pretrained(base_path)
    present = {name.rsplit(".", 1)[-1] for name, _ in base.named_modules()}
    missing = [m for m in target_modules if m not in present]
    if missing:
        from ..errors import MasdrError

        raise MasdrError(f"target_modules {missing} not found in {base_path}; "
                         f"this encoder has e.g. {sorted(present - {''})[:12]}")
    lora = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=target_modules,
                      bias="none")
    return RouterModel(get_peft_model(base, lora), n_labels, pooling=pooling, head_dropout=head_dropout,
                       hidden_size=int(base.config.hidden_size))


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that training changes (LoRA adapters and head), detached copies on CPU."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    if missing:
        raise KeyError(f"checkpoint lacks {len(missing)} trainable tensors, e.g. {missing[:3]}")
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t.to(params[n].device))
