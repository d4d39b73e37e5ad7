"""Building the LoRA router model for training: pretrained encoder + fresh LoRA adapters + a new
head, and moving its trainable state in and out (for checkpoints and early stopping)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

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


def start_weights(model: RouterModel) -> dict[str, torch.Tensor]:
    """What fine-tuning starts from, besides LoRA's zero update: the head, and with the encoder's own
    weights trainable (``finetune_weights: all``) those weights too; detached copies on CPU, by name."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()
            if p.requires_grad and "lora_" not in n}


def weight_space_ensemble(model: RouterModel, alpha: float, start: dict[str, torch.Tensor]) -> None:
    """Make ``model`` the weight-space ensemble (WiSE-FT, Wortsman et al. 2022) of itself, fine-tuned
    (``alpha`` = 1), and the model fine-tuning started from (``alpha`` = 0): the probe head on the
    same encoder, ``start`` (:func:`start_weights`). LoRA's B matrices start at zero, so scaling them
    by ``alpha`` scales the adapters' whole update; every weight in ``start`` is interpolated."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(alpha)
            elif name in start:
                p.mul_(alpha).add_(start[name].to(p.device), alpha=1 - alpha)


@contextlib.contextmanager
def ensembled(model: RouterModel, alpha: float, start: dict[str, torch.Tensor] | None) -> Iterator[None]:
    """:func:`weight_space_ensemble` for the duration of the block, the fine-tuned weights restored
    after it (training goes on from them); nothing at ``alpha`` = 1."""
    if alpha == 1 or start is None:
        yield
        return
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n or n in start}
    weight_space_ensemble(model, alpha, start)
    try:
        yield
    finally:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in saved.items():
                params[n].copy_(t)


def model_soup(models: Sequence[RouterModel]) -> RouterModel:
    """Make ``models[0]`` the uniform soup (Wortsman et al. 2022) of ``models``, runs of one recipe
    from one pretrained encoder at different seeds: the model whose weights are the average of theirs.

    Exact and still a LoRA model: the average of k updates ``s·B_i A_i`` is one adapter of rank k·r
    whose A stacks the ``A_i`` and whose B stacks the ``B_i / k`` (alpha scaled by k keeps ``s``), so
    the artifact's ``adapter/`` stays loadable with peft. Every other weight that differs between the
    runs (the head; the encoder itself after a contrastive stage) is averaged.

    >>> import copy, torch
    >>> from masdr_router.routers.lora.model import RouterModel
    >>> a = RouterModel(nn.Identity(), 2, hidden_size=3)
    >>> with torch.no_grad(): _ = a.head.bias.zero_()
    >>> b = copy.deepcopy(a)
    >>> with torch.no_grad(): _ = b.head.bias.fill_(1.0)
    >>> model_soup([a, b]).head.bias.tolist()
    [0.5, 0.5]
    """
    from peft.tuners.lora import LoraLayer

    first, k = models[0], len(models)
    if k == 1:
        return first
    modules = [dict(m.named_modules()) for m in models]
    with torch.no_grad():
        for name, layer in modules[0].items():
            if not isinstance(layer, LoraLayer):
                continue
            for adapter in list(layer.lora_A.keys()):
                a = torch.cat([mods[name].lora_A[adapter].weight for mods in modules], dim=0)
                b = torch.cat([mods[name].lora_B[adapter].weight for mods in modules], dim=1) / k
                new_a = nn.Linear(a.shape[1], a.shape[0], bias=False).to(a.device, a.dtype)
                new_b = nn.Linear(b.shape[1], b.shape[0], bias=False).to(b.device, b.dtype)
                new_a.weight.copy_(a)
                new_b.weight.copy_(b)
                layer.lora_A[adapter], layer.lora_B[adapter] = new_a, new_b
                layer.r[adapter] *= k
                layer.lora_alpha[adapter] *= k  # scaling = alpha / r: unchanged
        for conf in getattr(first.encoder, "peft_config", {}).values():
            conf.r, conf.lora_alpha = conf.r * k, conf.lora_alpha * k
        params = [dict(m.named_parameters()) for m in models]
        for name, p in params[0].items():
            if "lora_" in name:
                continue
            others = [ps[name] for ps in params[1:]]
            if all(torch.equal(p, o) for o in others):  # the frozen encoder: left bit for bit as it is
                continue
            p.copy_(torch.stack([p, *others]).mean(0))
    return first
