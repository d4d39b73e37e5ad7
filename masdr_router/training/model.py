"""Building the LoRA router model for training: pretrained encoder + fresh LoRA adapters + a new
head, and moving its trainable state in and out (for checkpoints and early stopping)."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..routers.lora.model import RouterModel


def build_lora_model(base_path: str, n_labels: int, *, pooling: str, head_dropout: float, lora_r: int,
                     lora_alpha: int, lora_dropout: float, target_modules: list[str],
                     normalize: bool = False) -> RouterModel:
    """A fresh model: pretrained encoder + new LoRA adapters + a new head (seed torch first)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    base = AutoModel.from_pretrained(base_path)
    present = {name.rsplit(".", 1)[-1] for name, _ in base.named_modules()}
    missing = [m for m in target_modules if m not in present]
    if missing:
        raise ConfigError(f"{missing} not found in {base_path}; this encoder has e.g. "
                          f"{sorted(present - {''})[:12]}", field="target_modules")
    lora = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=target_modules,
                      bias="none")
    return RouterModel(get_peft_model(base, lora), n_labels, pooling=pooling, head_dropout=head_dropout,
                       hidden_size=int(base.config.hidden_size), normalize=normalize)


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
