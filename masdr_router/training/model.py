"""Building the LoRA router model for training: pretrained encoder + fresh LoRA adapters + a new
head, and moving its trainable state in and out (for checkpoints and early stopping)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..errors import ConfigError
from ..routers.lora.model import RouterModel


def build_lora_model(base_path: str, n_labels: int, *, pooling: str, head_dropout: float, lora_r: int,
                     lora_alpha: int, lora_dropout: float, target_modules: list[str],
                     normalize: bool = False) -> RouterModel:
    """A fresh model: pretrained encoder + new LoRA adapters + a new head, initialised from torch's
    global generator (``build_run`` seeds it)."""
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


def weight_space_ensemble(model: RouterModel, alpha: float, start_head: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Make ``model`` the weight-space ensemble (WiSE-FT, Wortsman et al. 2022) of itself, fine-tuned
    (``alpha`` = 1), and the model fine-tuning started from (``alpha`` = 0): the probe head
    ``start_head`` on the same encoder. LoRA's B matrices start at zero, so scaling them by ``alpha``
    scales the adapters' whole update; the head is interpolated."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(alpha)
        for p, p0 in zip((model.head.weight, model.head.bias), start_head, strict=True):
            p.mul_(alpha).add_(p0.to(p.device), alpha=1 - alpha)


@contextlib.contextmanager
def ensembled(model: RouterModel, alpha: float, start_head: tuple[torch.Tensor, torch.Tensor] | None) -> Iterator[None]:
    """:func:`weight_space_ensemble` for the duration of the block, the fine-tuned weights restored
    after it (training goes on from them); nothing at ``alpha`` = 1."""
    if alpha == 1 or start_head is None:
        yield
        return
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n or n.startswith("head.")}
    weight_space_ensemble(model, alpha, start_head)
    try:
        yield
    finally:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in saved.items():
                params[n].copy_(t)
