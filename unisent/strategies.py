"""Distributed strategies that YAML can configure (see recipes/trainers/ and docs/scaling.md)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Literal

import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

from .io import import_object
from .lightning_compat import default_process_group_backend, process_group_timeout, set_process_group_backend

__all__ = ["EncoderFSDP", "TRANSFORMER_LAYERS", "join_elastic_group"]

#: transformer layer classes of the backbones unisent's presets use (BERT, RoBERTa, XLM-R families)
TRANSFORMER_LAYERS = [
    "transformers.models.bert.modeling_bert.BertLayer",
    "transformers.models.roberta.modeling_roberta.RobertaLayer",
    "transformers.models.xlm_roberta.modeling_xlm_roberta.XLMRobertaLayer",
]


class EncoderFSDP(FSDPStrategy):
    """Lightning's FSDP with every transformer layer as one shard unit, named by import path (YAML cannot express
    ``auto_wrap_policy``'s set of classes: LightningCLI drops it).

    Args:
        layer_classes: import paths of the layer classes that become FSDP units (default: BERT, RoBERTa and XLM-R
            layers; add your backbone's).
        activation_checkpointing: recompute each layer's activations in the backward pass (less memory, about a
            third more compute).
        sharding_strategy: ``FULL_SHARD`` (parameters, gradients, optimiser state), ``SHARD_GRAD_OP`` (gradients and
            optimiser state), ``HYBRID_SHARD`` (full sharding within a node, replicas across nodes), ``NO_SHARD``.
        state_dict_type: ``full`` gathers each checkpoint into one file (what ``unisent.load`` reads); ``sharded``
            writes a directory per checkpoint, faster for very large models.
        **kwargs: other arguments of ``lightning.pytorch.strategies.FSDPStrategy``.
    """

    def __init__(
        self,
        layer_classes: list[str] | None = None,
        activation_checkpointing: bool = False,
        sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD"] = "FULL_SHARD",
        state_dict_type: Literal["full", "sharded"] = "full",
        **kwargs: Any,
    ) -> None:
        self.layer_classes = list(layer_classes if layer_classes is not None else TRANSFORMER_LAYERS)
        classes = {import_object(path, "layer class") for path in self.layer_classes}
        super().__init__(
            auto_wrap_policy=classes,
            activation_checkpointing_policy=classes if activation_checkpointing else None,
            sharding_strategy=sharding_strategy,
            state_dict_type=state_dict_type,
            **kwargs,
        )


def join_elastic_group(strategy: Any) -> bool:
    """Under ``torchrun``: join this start's process group through store keys of its own; whether it did.

    torchrun's workers share the agent's store across restarts, and the default process group's keys carry
    no restart number: a restarted worker can read the address a worker of the previous start published,
    and gloo then waits on a dead peer (torch 2.13: ``connectFullMesh ... Connection refused`` or a hang until
    the group's timeout). Here the keys are prefixed with ``TORCHELASTIC_RESTART_COUNT``; Lightning finds
    the group initialised and uses it. Outside torchrun, or for a strategy without a process group of its
    own making: nothing (``False``)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restart is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not dist.is_available():
        return False
    if not isinstance(strategy, DDPStrategy) or dist.is_initialized():
        return False
    device = strategy.root_device
    backend = default_process_group_backend(strategy, device)
    timeout = process_group_timeout(strategy) or timedelta(minutes=30)
    # TCPStore, PrefixStore: public torch.distributed API that its stubs do not re-export
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)  # pyright: ignore[reportPrivateImportUsage]
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"unisent/start_{restart}", agent),  # pyright: ignore[reportPrivateImportUsage]
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    set_process_group_backend(strategy, backend)
    return True
