"""The sentence encoder: a Hugging Face backbone, a tokenizer and a pooler (its save/load here; its
export declarations in ``unisent.encoders.export_declarations``)."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ..hardware import inference_precision
from ..inference.model_types import register_model
from ..io import write_json
from ..io.model_files import ModelFileError, check_fits, load_state, read_model_json, read_state, weight_shapes
from .batching import TokenIds, length_batches, ordered_map, reference_batching_enabled, report_truncation
from .config import POOLER_WEIGHTS, UNISENT_CONFIG, EncoderConfig
from .export_declarations import EncoderModel
from .loading import load_backbone, load_tokenizer, resolve_model_location
from .packed import packed_forward, supports_packing
from .poolers import Pooler, build_pooler, check_export_modes, head_pooler, pooler_class
from .resolution import resolve_encoder_config
from .st_files import set_lowercase

if TYPE_CHECKING:
    from transformers.models.bert.modeling_bert import BertModel

__all__ = ["Encoder"]


def _check_pooler_sizes(location: str, pooler: str, hidden_size: int, declared: dict) -> None:
    """For a directory unisent saved: the pooler its ``unisent_encoder.json`` describes (a Sentence
    Transformers ``Dense``'s ``out_features``...), built on the ``meta`` device, against ``pooler.pt``'s
    shapes, before it is allocated (``check_fits``)."""
    settings_file, weights_file = Path(location, UNISENT_CONFIG), Path(location, POOLER_WEIGHTS)
    if not settings_file.is_file():
        return
    shapes = weight_shapes(weights_file) if weights_file.exists() else {}

    def build():
        built = build_pooler(pooler, hidden_size)
        built.configure(declared, location)
        return built

    modules = [m for m in declared.get("modules") or [] if isinstance(m, dict)]
    fields = {
        f"sentence_transformers.modules[{i}].config.{key}": value
        for i, module in enumerate(modules)
        if isinstance(module.get("config"), dict)
        for key, value in module["config"].items()
    }
    check_fits(build, shapes, config_file=settings_file, settings=fields, weights_file=weights_file)


def apply_prompt(
    tokenizer,
    declared: dict[str, Any],
    sentences: Sequence[str],
    prompt: str | None = None,
    prompt_name: str | None = None,
) -> tuple[list[str], int | None]:
    """Prompts as Sentence Transformers applies them: ``(sentences with the prompt in front, the prompt's length in
    tokens or None)``. The prompt text ``encode`` prepends: ``prompt``, else ``prompts[prompt_name]``, else the
    default prompt, else none; ``declared``: ``EncoderConfig.sentence_transformers`` (``{}``: no prompts). The
    length, without a trailing special token, is what ``Pooling(include_prompt=False)`` leaves out (the pooler's
    ``prompt_length``)."""
    prompts = declared.get("prompts") or {}
    if prompt is None and prompt_name is not None:
        if prompt_name not in prompts:
            raise ValueError(
                f"prompt_name {prompt_name!r} is not one of the model's prompts ({', '.join(prompts) or 'none'})"
            )
        prompt = prompts[prompt_name]
    elif prompt is None:
        default = declared.get("default_prompt_name")
        prompt = prompts.get(default) if default else None
    if not prompt:
        return list(sentences), None
    ids = tokenizer(prompt)["input_ids"]
    length = len(ids) - int(bool(ids) and ids[-1] in set(tokenizer.all_special_ids))
    return [prompt + s for s in sentences], length


@register_model("encoder")
class Encoder(EncoderModel, TokenIds):
    """Backbone + pooler. ``forward`` maps token ids to sentence vectors; ``encode`` maps strings.

    How it is exported and described (model card, Sentence Transformers modules, ``transformers``
    recipe) is declared by its base ``EncoderModel`` and its pooler.

    Args:
        config: an [`EncoderConfig`][unisent.encoders.EncoderConfig]; ``self.config`` is its resolved copy
            ([`resolve_encoder_config`][unisent.encoders.resolve_encoder_config]: the unset fields filled in
            from the preset or the model's Sentence Transformers files).
    """

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__()
        self.config = resolve_encoder_config(config or EncoderConfig())
        location = resolve_model_location(self.config.model)
        dropout = ("hidden_dropout_prob", "attention_probs_dropout_prob") if self.config.dropout is not None else ()
        overrides = dict.fromkeys(dropout, self.config.dropout)
        self.backbone = load_backbone(
            location, attn_implementation=self.config.attn_implementation, config_overrides=overrides
        )
        self.backbone.train()  # from_pretrained returns eval mode; nn.Modules start in training mode
        positions, inference = self.position_limit(), self.config.inference_max_length
        if inference and positions and inference > positions:
            raise ValueError(
                f"encoder.inference_max_length={inference} exceeds the {positions} positions of the backbone "
                f"({type(self.backbone).__name__}); use at most {positions}, or leave it unset for the "
                "backbone's own limit"
            )
        self.tokenizer = load_tokenizer(location)
        declared = self.config.sentence_transformers or {}
        length = declared.get("max_seq_length")
        if length is not None and positions and not (type(length) is int and 0 < length <= positions):
            file = UNISENT_CONFIG if Path(location, UNISENT_CONFIG).is_file() else "sentence_bert_config.json"
            raise ModelFileError(
                f"{Path(location, file)}: max_seq_length={length!r:.40} is not a length within the {positions} "
                f"positions of the backbone ({type(self.backbone).__name__}): refused now, not at the first long input"
            )
        if declared.get("do_lower_case"):
            set_lowercase(self.tokenizer)
        self.packs = self.config.unpad and supports_packing(self.backbone)
        assert self.config.pooler is not None  # resolve_encoder_config sets it
        _check_pooler_sizes(location, self.config.pooler, self.hidden_size, declared)
        self.pooler = build_pooler(self.config.pooler, self.hidden_size)
        self.pooler.configure(declared, location)
        check_export_modes(self.pooler, self.backbone.config)  # a Pooling mode the export would refuse, now
        self._saved_pooler = Path(location, POOLER_WEIGHTS)
        if self._saved_pooler.is_file():
            load_state(self.pooler, read_state(self._saved_pooler), source=self._saved_pooler)

    @property
    def hidden_size(self) -> int:
        """Size of the pooled sentence vectors: the backbone's hidden size, unless the pooler changes
        it (``output_size``: a Sentence Transformers model's ``Dense``)."""
        return getattr(self.__dict__.get("_modules", {}).get("pooler"), "output_size", None) or (
            self.backbone.config.hidden_size
        )

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if isinstance(pad, int) else 0

    def forward(
        self,
        input_ids: torch.Tensor,  # (batch, seq)
        attention_mask: torch.Tensor,  # (batch, seq)
        unpad: bool | None = None,
        pooler: str | None = None,
        top_layers: nn.ModuleList | None = None,
        **backbone_kwargs,
    ) -> torch.Tensor:
        """Return pooled sentence vectors of shape (batch, hidden); ``unpad=False``: the backbone's own forward even
        where the unpadded one applies (``None``: ``config.unpad``). ``pooler``: the vectors of another parameter-free
        built-in pooler than the encoder's own ([`named_pooler`][unisent.encoders.Encoder.named_pooler]; a head that
        reads e.g. ``cls`` while the encoder's sentence vectors are ``mean``). ``top_layers``: k layers that replace the
        backbone's top k (a head's own copies, [`top_layer_copies`][unisent.encoders.Encoder.top_layer_copies]); always
        the unpadded forward, without gradient checkpointing."""
        pool = self.pooler if pooler is None else self.named_pooler(pooler)
        packs = self.packs if unpad is None else unpad and self.packs
        layers = None
        if top_layers:
            own = self._own_layers_backbone(set(backbone_kwargs) - {"token_type_ids"})
            layers, packs = list(own[: len(own) - len(top_layers)]) + list(top_layers), True
        if packs and set(backbone_kwargs) <= {"token_type_ids"} and (layers or not self._checkpointing()):
            last, states = packed_forward(
                self.backbone,
                input_ids,
                attention_mask,
                output_hidden_states=pool.needs_hidden_states,
                layers=layers,
                **backbone_kwargs,
            )
            return pool(last, attention_mask, states)
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=pool.needs_hidden_states,
            **backbone_kwargs,
        )
        return pool(out.last_hidden_state, attention_mask, out.hidden_states)

    def top_layer_copies(self, k: int) -> nn.ModuleList:
        """Copies of the backbone's top ``k`` layers, with their current weights (for ``top_layers``)."""
        layers = self._own_layers_backbone()
        if not 0 < k < len(layers):
            raise ValueError(f"k must be in [1, {len(layers) - 1}] for this backbone ({len(layers)} layers), got {k}")
        return copy.deepcopy(nn.ModuleList(layers[len(layers) - k :]))

    def _own_layers_backbone(self, other_inputs: set[str] | None = None) -> nn.ModuleList:
        """The backbone's layers, which own top layers replace in the unpadded forward, or ``ValueError``."""
        if not supports_packing(self.backbone) or other_inputs:
            raise ValueError(
                f"own top layers need a BERT-family backbone unisent unpads; {type(self.backbone).__name__} is not"
                + (f" (or inputs besides token_type_ids: {sorted(other_inputs)})" if other_inputs else "")
            )
        return cast("BertModel", self.backbone).encoder.layer  # BERT-structured (supports_packing)

    def named_pooler(self, name: str) -> Pooler:
        """The built-in pooler ``name`` (``cls``, ``mean``, ``max``...) on this backbone, built once; only
        parameter-free ones, as nothing would train or save another's weights (``ValueError`` otherwise)."""
        cache = self.__dict__.setdefault("_named_poolers", {})
        if name not in cache:
            cache[name] = head_pooler(name, self.backbone.config.hidden_size)
        return cache[name]

    def _checkpointing(self) -> bool:
        newer = hasattr(type(self.backbone), "is_activation_checkpointing")
        flag = "is_activation_checkpointing" if newer else "is_gradient_checkpointing"
        return self.training and bool(getattr(self.backbone, flag, False))

    # ----------------------------------------------------------------------------------- inference
    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
        workers: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
    ) -> torch.Tensor:
        """Embed ``sentences``; returns a float32 tensor (n, hidden) on the CPU, rows in input order.

        The model's embeddings: the pooler's vectors, L2-normalised when ``config.normalize`` is set (``normalize=True``
        normalises in any case; ``False`` does not undo the model's own normalisation, as in Sentence Transformers). See
        [`encode_pooled`][unisent.encoders.Encoder.encode_pooled] for the arguments.
        """
        options = {"precision": precision, "show_progress_bar": show_progress_bar, "workers": workers}
        options |= {"prompt_name": prompt_name, "prompt": prompt}
        return self.encode_pooled(sentences, batch_size, normalize=normalize or bool(self.config.normalize), **options)

    def encode_pooled(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        *,
        normalize: bool = False,
        precision: str = "auto",
        show_progress_bar: bool = False,
        workers: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        pooler: str | None = None,
        top_layers: nn.ModuleList | None = None,
    ) -> torch.Tensor:
        """The pooler's vectors of ``sentences`` without ``config.normalize``: what the training losses
        see and what a head on the encoder (GaussCSE, CMLM's projection) is trained on. A float32
        tensor (n, hidden) on the CPU, rows in input order; ``normalize``: L2-normalise them.

        Batches are formed from length-sorted sentences (less padding) and put back in order; inside
        [`reference_batching`][unisent.encoders.reference_batching] they are Sentence Transformers' batches and vectors.
        ``workers``: on a CPU, batches run in this many threads at once, the intra-op threads
        (``torch.get_num_threads()``) split between them; small models waste less time in synchronising threads inside
        each small operation that way. Default: one worker per intra-op thread, at most 4, on CPU; 1 on accelerators.
        The thread setting is restored after. ``prompt`` (a text) or ``prompt_name`` (one of a Sentence Transformers
        model's prompts) is put in front of every sentence; by default the model's default prompt, if it has one.
        ``precision``: ``auto`` (bf16 on GPUs with bf16 and CPUs with AVX512-BF16 or AMX, fp32 elsewhere:
        ``unisent.hardware.inference_precision``), ``fp32`` or ``bf16`` (bfloat16 autocast).
        ``pooler``: another built-in parameter-free pooler's vectors
        ([`named_pooler`][unisent.encoders.Encoder.named_pooler]), e.g. what a Gaussian head that reads ``cls`` was
        trained on. ``top_layers``: as in [`forward`][unisent.encoders.Encoder.forward] (run in eval mode).
        """
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        declared = self.config.sentence_transformers or {}
        sentences, prompt_length = apply_prompt(self.tokenizer, declared, sentences, prompt, prompt_name)
        was_training = [(m, m.training) for m in (self, top_layers) if m is not None]
        for module, _ in was_training:
            module.eval()
        device = next(self.parameters()).device
        bf16 = inference_precision(precision, device.type)[0]
        ids, truncated = self._tokenize_counting(sentences)
        report_truncation(self, truncated, len(ids), self.config.max_length)
        size = self.hidden_size if pooler is None else self.backbone.config.hidden_size
        out = torch.empty((len(ids), size), dtype=torch.float32)
        n_batches = -(-len(ids) // batch_size)
        threads = torch.get_num_threads()
        reference = reference_batching_enabled()
        if workers is None:
            workers = min(threads, 4) if device.type == "cpu" and not reference else 1
        workers = max(1, min(workers, n_batches))
        batches = length_batches(
            ids, batch_size, self.pad_token_id, sentences if reference else None, show_progress_bar
        )

        def embed(batch) -> tuple[list[int], torch.Tensor]:
            idx, input_ids, attention_mask = batch
            # grad and autocast modes are per thread: set them in the thread that runs the batch
            autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
            with torch.inference_mode(), autocast:
                unpad = False if reference else None
                options = {"unpad": unpad, "pooler": pooler, "top_layers": top_layers}
                emb = self(input_ids.to(device), attention_mask.to(device), **options).float()
                if normalize:
                    emb = nn.functional.normalize(emb, dim=-1)
                return idx, emb.cpu()

        # the pooler leaves out the prompt's tokens (poolers without prompt support ignore it) while this runs
        prompt_before, self.pooler.prompt_length = self.pooler.prompt_length, prompt_length
        try:
            for idx, emb in ordered_map(embed, batches, workers, per_thread=max(1, threads // workers)):
                out[torch.as_tensor(idx)] = emb
        finally:
            self.pooler.prompt_length = prompt_before
            torch.set_num_threads(threads)  # the workers set their share; restore the caller's setting
            for module, mode in was_training:
                module.train(mode)
        return out

    # ----------------------------------------------------------------------------------- save/load
    @classmethod
    def from_name(cls, name: str) -> Encoder:
        """``Encoder(EncoderConfig(model=name))``: a preset name or a hub id."""
        return cls(EncoderConfig(model=name))

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write backbone, tokenizer, pooler weights, the encoder settings and the model record to
        ``directory``.

        ``Encoder(EncoderConfig(model=directory))`` loads it back (pooler and max length included). A
        pooler from outside unisent is recorded by its class path: loading finds it in the registry when its
        module was imported (a plugin, ``--import MODULE``), and never imports it.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if any(True for _ in self.pooler.parameters()):
            torch.save(self.pooler.state_dict(), directory / POOLER_WEIGHTS)
        # "model": "." (this directory; loading reads the directory it is in), never a machine's absolute path
        settings = asdict(self.config) | {"model": "."}
        pooler = type(self.pooler)
        if not pooler.__module__.startswith("unisent."):
            settings["pooler"] = f"{pooler.__module__}.{pooler.__qualname__}"
        write_json(directory / UNISENT_CONFIG, settings)
        self.write_model_record(directory)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> Encoder:
        """Load an encoder saved by [`save_pretrained`][unisent.encoders.Encoder.save_pretrained] (or any model
        directory, pooled with ``cls``)."""
        settings_file = Path(directory, UNISENT_CONFIG)
        settings = read_model_json(settings_file) if settings_file.is_file() else {}
        if not isinstance(settings, dict):
            raise ValueError(
                f"{settings_file}: expected a JSON object of encoder settings, got {type(settings).__name__}"
            )
        if settings.get("pooler") is not None:  # through the registry, naming the file: nothing is imported
            pooler_class(settings["pooler"], source=str(settings_file), field="pooler")
        settings["model"] = str(directory)
        try:
            config = EncoderConfig(**settings)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{settings_file}: {err}") from None
        return cls(config)
