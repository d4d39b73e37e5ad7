"""Training configuration for the LoRA router. ``configs/train/*.yaml`` mirror it one-to-one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import DEFAULT_ENCODER, ConfigBase


@dataclass
class TrainConfig(ConfigBase):
    """Everything that decides how a router is trained, calibrated and exported.

    >>> TrainConfig(epochs=3).epochs
    3
    >>> TrainConfig(target_modules="query")
    Traceback (most recent call last):
    ...
    masdr_router.errors.ConfigError: TrainConfig: field 'target_modules': expected a list of strings, got 'query'
    """

    # model
    base_model: str = field(default=DEFAULT_ENCODER, metadata={"help": "'minilm' or a local HF encoder dir"})
    pooling: Literal["mean", "cls", "pooler"] = field(default="mean", metadata={
        "help": "'mean' over tokens, 'cls', or 'pooler' (the encoder's pooler: the head of the standard "
                "*ForSequenceClassification models, so the artifact is also a transformers classifier)"})
    max_length: int = field(default=64, metadata={"help": "token limit for a query"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    target_modules: list[str] = field(default_factory=lambda: ["query", "key", "value", "dense"],
                                      metadata={"help": "module names that get LoRA adapters"})
    head_dropout: float = 0.1
    finetune_weights: Literal["lora", "all"] = field(default="lora", metadata={
        "help": "what classification fine-tuning tunes besides the head: 'lora', the adapters; 'all', every "
                "weight of the encoder too, at encoder_learning_rate (the artifact then stores the merged "
                "encoder, without a separate adapter)"})
    encoder_learning_rate: float = field(default=5e-5, metadata={
        "help": "with finetune_weights: all, the peak learning rate of the encoder's own weights (the adapters "
                "and the head keep learning_rate)"})
    # regime: how the data is used
    regime: Literal["auto", "holdout", "cv"] = field(default="auto", metadata={
        "help": "'holdout': train on all but a validation split (see holdout_choice); 'cv': choose the epoch "
                "count by k-fold cross-validation, then refit on all the data; 'auto': without a validation file, cv "
                "below cv_below training queries or when the thresholds are chosen for retrieval (--index), "
                "else holdout"})
    cv_folds: int = field(default=3, metadata={"help": "folds for the cv regime"})
    cv_below: int = field(default=1000, metadata={"help": "auto uses cv below this many training queries"})
    cv_choice: Literal["auto", "best", "one_se", "budget"] = field(default="auto", metadata={
        "help": "how cv picks the epoch count: 'best', the best out-of-fold macro-F1; 'one_se', the fewest epochs "
                "within one (paired bootstrap) standard error of it; 'budget', no choice: the whole epoch budget "
                "(the folds then only give held-out predictions for calibration and the guard); 'auto': budget after a "
                "contrastive stage (few-shot), else best"})
    features: Literal["auto", "normalized", "raw"] = field(default="auto", metadata={
        "help": "what the head and the probe see: 'normalized' (L2, the sentence embeddings; the probe is logistic "
                "regression with C=3), 'raw' pooled features (the probe standardises them and picks C by "
                "cross-validation); 'auto': normalized, except raw for pooling 'pooler' (a standard transformers "
                "classifier cannot normalise)"})
    head_init: Literal["probe", "random"] = field(default="probe", metadata={
        "help": "'probe': start the head from a logistic-regression probe on frozen features (LP-FT)"})
    finetune_alpha: float | None = field(default=None, metadata={
        "help": "the exported model is the weight-space ensemble (WiSE-FT) of the fine-tuned model (1) and the "
                "one fine-tuning started from, the probe on the same encoder (0): LoRA's update scaled by alpha, "
                "the head interpolated; held-out scores are those of the ensemble (needs head_init: probe); "
                "null: few_shot_alpha after a contrastive stage (whose probe is a strong model), else 1"})
    few_shot_alpha: float = field(default=0.25, metadata={
        "help": "finetune_alpha when it is null and the contrastive stage ran"})
    keep_probe: bool = field(default=True, metadata={
        "help": "export a frozen-encoder head instead when it scores better on validation (recorded in the card)"})
    guard_margin_se: float = field(default=1.0, metadata={
        "help": "keep_probe exports a frozen head only when its held-out macro-F1 leads the LoRA model's by more "
                "than this many bootstrap standard errors of the paired difference (0: any lead)"})
    frozen_heads: list[str] = field(default_factory=lambda: ["probe"], metadata={
        "help": "the frozen-encoder heads keep_probe may export: 'probe' (logistic regression) and/or "
                "'centroid' (nearest scope centroid); both are always scored and recorded"})
    contrastive: Literal["auto", "on", "off"] = field(default="auto", metadata={
        "help": "a SetFit-style contrastive stage on the encoder (same-scope pairs close, others apart; see "
                "contrastive_weights) before the head is fitted and classification starts; 'auto': on in the cv "
                "regime when there are fewer than contrastive_below training queries per scope"})
    contrastive_below: float = field(default=80, metadata={
        "help": "auto runs the contrastive stage below this mean number of training queries per scope (it "
                "gained at 64 on BBC and lost at 91 on SQLAlchemy)"})
    contrastive_check: bool = field(default=True, metadata={
        "help": "with contrastive: auto and at least contrastive_check_from queries per scope, cross-validate the "
                "run without the stage too and drop the stage when that run's out-of-fold macro-F1 leads by more "
                "than contrastive_check_margin_se bootstrap standard errors (recorded in the card; costs the folds "
                "once more without the stage)"})
    contrastive_check_margin_se: float = field(default=2.0, metadata={
        "help": "the lead, in bootstrap standard errors of the paired out-of-fold difference, the run without the "
                "stage needs for the stage to be dropped (the folds favour that run, since the "
                "stage gains more from the third of the data they lack)"})
    contrastive_check_from: float = field(default=16, metadata={
        "help": "contrastive_check runs from this mean number of training queries per scope (below it the folds, "
                "trained on two thirds of a few queries per scope, underrate the stage)"})
    contrastive_iterations: int = field(default=20, metadata={
        "help": "contrastive pairs per query: this many with its own scope and this many with another"})
    contrastive_max_steps: int = field(default=600, metadata={
        "help": "cap on the contrastive stage's batches (SetFit's 20 iterations reach it at 480 training queries)"})
    contrastive_batch_size: int = field(default=32, metadata={
        "help": "pairs per batch of the contrastive stage (its own: a large classification batch would make "
                "few steps of a few pairs)"})
    contrastive_weights: Literal["all", "lora"] = field(default="all", metadata={
        "help": "what the contrastive stage tunes: 'all' the encoder's weights (as SetFit does; the artifact "
                "stores the merged encoder, without a separate adapter), or 'lora' the adapters only"})
    # labelled: on BBC at 8 labelled queries per scope with 100 pseudo-queries a scope (two samples)
    # 0.882 / 0.879 macro-F1 against 0.883 / 0.881 pairing all 540 queries, in 1,323 / 706 s instead of
    # 4,081 / 5,025 on 2 CPU cores (all: the 600-step cap in each of the four trainings, which ~1,000
    # pseudo-queries a scope, --corpus' default, would always reach)
    contrastive_rows: Literal["all", "labelled"] = field(default="labelled", metadata={
        "help": "with --corpus and labelled queries: the queries the contrastive stage pairs, 'all' (the "
                "pseudo-queries too) or 'labelled' (the pseudo-queries join classification only; a few "
                "labelled queries make a short stage instead of contrastive_max_steps)"})
    contrastive_learning_rate: float | None = field(default=None, metadata={
        "help": "the contrastive stage's peak learning rate (warm-up, then linear decay); null: 2e-5 for all "
                "weights (SetFit's), 1e-4 for the adapters"})
    # 0.1: mixed into the router's probe on 5 sets x 3 samples (bench/corpus_mix.py), ~1,000
    # pseudo-queries a scope at 0.1 / 0.3 / 1 gained +0.113 / +0.098 / +0.082 macro-F1 at 8 labelled
    # queries per scope, +0.032 / +0.024 / +0.009 at 32; 0.1 won 19 of 25 (set, size) cells
    corpus_weight: float = field(default=0.1, metadata={
        "help": "with --corpus: the weight of one pseudo-query in the loss, a labelled query weighing 1"})
    # sample: at 8 labelled queries per scope with ~1,000 pseudo-queries a scope (synth-queries' default)
    # BBC (two samples) / composite / SQLAlchemy / Django scored 0.880, 0.883 / 0.786 / 0.450 / 0.329
    # macro-F1 in 619-1,291 s on 2 CPU cores, against 0.882, 0.879 / 0.756 / 0.383 / 0.274 in 706-1,439 s
    # for 'all' over 100 a scope (the same rows an epoch); 'all' over 1,000 a scope trains ten times the rows
    corpus_per_epoch: Literal["all", "sample"] = field(default="sample", metadata={
        "help": "with --corpus and labelled queries: how the pseudo-queries enter an epoch, 'all' (every one, "
                "at corpus_weight) or 'sample' (a fresh seeded sample of corpus_weight x their number, at "
                "weight 1: the same expected weight, 1/corpus_weight times fewer rows an epoch)"})
    # on the probe over 5 sets x 5 sizes x 3 samples (bench/corpus_mix.py --check): kept the corpus on all
    # 45 samples from 8 to 32 labelled queries per scope (gains +0.03 to +0.11), left it out on Django and
    # SQLAlchemy with all their queries (where it cost 0.015 / 0.018); the mean there -0.009 -> -0.002.
    # Fine-tuned, the corpus costs more with many labels (SQLAlchemy, all: 0.553 against 0.635) and the
    # probe's check kept it there: hence corpus_check_finetune below
    corpus_check: bool = field(default=True, metadata={
        "help": "with --corpus and labelled queries: before training, fit the frozen probe with and without the "
                "pseudo-queries on k folds of the labelled queries; train without the corpus when the probe "
                "without it leads out of fold by more than corpus_check_margin_se (recorded in the card). The "
                "corpus helps most with few labelled queries and can cost a little with many"})
    # the holdout regime is where labels are plentiful and where fine-tuning lost to the corpus while the
    # probe did not say so; there a second run costs one more fine-tuning, where the cv regime's would
    # cost k more
    corpus_check_finetune: bool = field(default=True, metadata={
        "help": "with --corpus in the holdout regime: when the corpus is kept (or corpus_check is off), also "
                "fine-tune without it and train on the corpus only if that run does not lead on the validation "
                "split by more than corpus_check_margin_se (one more fine-tuning run; recorded in the card)"})
    corpus_check_margin_se: float = field(default=0.0, metadata={
        "help": "corpus_check (and corpus_check_finetune) drop the corpus when the probe (the fine-tuned run) "
                "without it leads by more than this many bootstrap standard errors of the paired difference "
                "(0: any lead)"})
    # optimisation
    epochs: int = field(default=12, metadata={"help": "epochs (the most, with early stopping or cv)"})
    min_steps: int = field(default=200, metadata={
        "help": "with little data, raise the epoch budget until training sees this many optimizer steps"})
    max_epochs: int = field(default=60, metadata={"help": "cap on the raised epoch budget"})
    batch_size: int = 32
    grad_accumulation_steps: int = field(default=1, metadata={
        "help": "batches whose gradients add up before one optimizer step (effective batch = batch_size x this)"})
    max_grad_norm: float = field(default=0.0, metadata={"help": "clip the gradient norm to this (0: no clipping)"})
    learning_rate: float = field(default=1e-3, metadata={"help": "LoRA adapters and head"})
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    class_weighting: Literal["balanced", "none"] = field(default="balanced", metadata={
        "help": "'balanced' or 'none'"})
    label_smoothing: float = 0.0
    holdout_choice: Literal["last", "best"] = field(default="last", metadata={
        "help": "which epoch the holdout regime exports: 'last', the whole epoch budget, its learning rate decayed "
                "to zero (the validation split then only chooses between LoRA and the frozen heads, and "
                "calibrates); 'best', the best validation macro-F1, stopping after early_stopping_patience epochs "
                "without gain"})
    holdout_soup: int = field(default=3, metadata={
        "help": "the holdout regime fine-tunes this many runs on its training split, at seeds seed, seed+1, ..., "
                "and exports their uniform soup (the average of their weights: one model, served at one model's "
                "cost; its adapter has rank holdout_soup x lora_r); 1: one run"})
    early_stopping_patience: int = field(default=3, metadata={
        "help": "with holdout_choice: best, stop after this many epochs without val macro-F1 gain"})
    val_fraction: float = field(default=0.15, metadata={"help": "held out of train when no val file"})
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = field(default="auto", metadata={
        "help": "'auto' (CUDA when present), 'cpu', 'cuda'"})
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = field(default="auto", metadata={
        "help": "'auto' (bf16 on CUDA), 'no', 'bf16', 'fp16'"})
    # calibration and abstention
    target_accuracy: float = field(default=0.95, metadata={"help": "accuracy-when-answered the threshold aims at"})
    target_abstain_rate: float | None = field(default=None, metadata={
        "help": "if set, choose the threshold for this abstention rate instead of target_accuracy"})
    threshold_objective: Literal["auto", "classification", "retrieval"] = field(default="auto", metadata={
        "help": "'classification': the threshold reaching target_accuracy; 'retrieval': the one giving the "
                "highest held-out P@10 with R@10 at least global search's (needs an index); 'auto': retrieval "
                "when an index is given"})
    below_threshold: Literal["abstain", "top2"] = field(default="abstain", metadata={
        "help": "'abstain' or 'top2' below threshold"})
    # logging
    report_to: Literal["none", "wandb"] = field(default="none", metadata={"help": "'none' or 'wandb'"})
    wandb_project: str = field(default="masdr-router", metadata={"help": "wandb project ($WANDB_PROJECT wins)"})
    wandb_mode: Literal["offline", "online", "disabled"] = field(default="offline", metadata={
        "help": "'offline' (default), 'online' or 'disabled' ($WANDB_MODE wins)"})
    progress: bool = True

    def validate(self) -> list[tuple[str, bool, str]]:
        positive = [(k, getattr(self, k) > 0, f"must be > 0, got {getattr(self, k)}")
                    for k in ("epochs", "batch_size", "max_length", "lora_r", "lora_alpha", "learning_rate",
                              "max_epochs", "cv_below", "grad_accumulation_steps", "contrastive_below",
                              "contrastive_batch_size", "encoder_learning_rate")]
        unit = [(k, 0 <= getattr(self, k) < 1, f"must be in [0, 1), got {getattr(self, k)}")
                for k in ("lora_dropout", "head_dropout", "warmup_ratio", "label_smoothing")]
        return [*positive, *unit,
                ("weight_decay", self.weight_decay >= 0, f"must be >= 0, got {self.weight_decay}"),
                ("holdout_soup", self.holdout_soup >= 1, f"must be >= 1, got {self.holdout_soup}"),
                ("early_stopping_patience", self.early_stopping_patience > 0,
                 f"must be > 0, got {self.early_stopping_patience}"),
                ("val_fraction", 0 < self.val_fraction < 1, f"must be in (0, 1), got {self.val_fraction}"),
                ("target_accuracy", 0 < self.target_accuracy <= 1,
                 f"must be in (0, 1], got {self.target_accuracy}"),
                ("target_abstain_rate", self.target_abstain_rate is None or 0 <= self.target_abstain_rate < 1,
                 f"must be in [0, 1), got {self.target_abstain_rate}"),
                ("target_modules", bool(self.target_modules), "must name at least one module"),
                ("frozen_heads", set(self.frozen_heads) <= {"probe", "centroid"},
                 f"must be a list of 'probe' and 'centroid', got {self.frozen_heads}"),
                ("finetune_alpha", self.finetune_alpha is None or (0 <= self.finetune_alpha <= 1 and (
                    self.finetune_alpha == 1 or self.head_init == "probe")),
                 f"must be null or in [0, 1], and 1 unless head_init is 'probe' (a random head is no model to "
                 f"interpolate with), got {self.finetune_alpha}"),
                *[(k, getattr(self, k) >= 0, f"must be >= 0, got {getattr(self, k)}")
                  for k in ("guard_margin_se", "contrastive_check_margin_se", "contrastive_check_from",
                            "corpus_check_margin_se")],
                ("few_shot_alpha", 0 <= self.few_shot_alpha <= 1, f"must be in [0, 1], got {self.few_shot_alpha}"),
                ("cv_folds", self.cv_folds >= 2, f"must be >= 2, got {self.cv_folds}"),
                ("corpus_weight", self.corpus_weight > 0, f"must be > 0, got {self.corpus_weight}"),
                ("contrastive_iterations", self.contrastive_iterations >= 1,
                 f"must be >= 1, got {self.contrastive_iterations}"),
                ("contrastive_max_steps", self.contrastive_max_steps >= 1,
                 f"must be >= 1 (contrastive: off disables the stage), got {self.contrastive_max_steps}"),
                ("contrastive_learning_rate",
                 self.contrastive_learning_rate is None or self.contrastive_learning_rate > 0,
                 f"must be > 0 or null, got {self.contrastive_learning_rate}"),
                ("min_steps", self.min_steps >= 0, f"must be >= 0, got {self.min_steps}"),
                ("max_grad_norm", self.max_grad_norm >= 0, f"must be >= 0 (0: off), got {self.max_grad_norm}"),
                ("max_epochs", self.max_epochs >= self.epochs,
                 f"must be >= epochs ({self.epochs}), got {self.max_epochs}")]

    @property
    def normalize(self) -> bool:
        """Whether the head sees L2-normalised features (``features``).

        >>> TrainConfig().normalize, TrainConfig(pooling="pooler").normalize
        (True, False)
        """
        return self.features == "normalized" or (self.features == "auto" and self.pooling != "pooler")

    @property
    def stage_learning_rate(self) -> float:
        """The contrastive stage's learning rate: as set, or the default for what it tunes.

        >>> TrainConfig().stage_learning_rate, TrainConfig(contrastive_weights="lora").stage_learning_rate
        (2e-05, 0.0001)
        """
        if self.contrastive_learning_rate is not None:
            return self.contrastive_learning_rate
        return 2e-5 if self.contrastive_weights == "all" else 1e-4

    def alpha(self, contrastive: bool) -> float:
        """The weight-space ensemble's alpha for a run with or without the contrastive stage.

        >>> TrainConfig().alpha(True), TrainConfig().alpha(False), TrainConfig(finetune_alpha=0.5).alpha(False)
        (0.25, 1.0, 0.5)
        >>> TrainConfig(head_init="random").alpha(True)   # no probe to interpolate with
        1.0
        """
        if self.finetune_alpha is not None:
            return self.finetune_alpha
        return self.few_shot_alpha if contrastive and self.head_init == "probe" else 1.0

    def epoch_choice(self, contrastive: bool) -> str:
        """How the cv regime settles the epoch count (``cv_choice``, ``auto`` resolved).

        >>> TrainConfig().epoch_choice(True), TrainConfig().epoch_choice(False)
        ('budget', 'best')
        """
        if self.cv_choice != "auto":
            return self.cv_choice
        return "budget" if contrastive else "best"
