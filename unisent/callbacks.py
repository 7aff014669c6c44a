"""Lightning callbacks that recipes name under ``trainer.callbacks`` (class_path ``unisent.callbacks.<Name>``)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, cast

from lightning.pytorch.callbacks import BaseFinetuning

if TYPE_CHECKING:
    from .lightning_module import UnisentModule

__all__ = ["FreezeEncoder"]


class FreezeEncoder(BaseFinetuning):
    """Keep the encoder exactly as loaded: only the objectives' own parameters (their heads) train.

    The encoder's parameters get ``requires_grad=False`` before the optimiser is built and it runs in
    eval mode, so its pooled vectors stay the base model's while a head learns on top (e.g. GaussCSE's,
    ``recipes/gausscse/quickstart.yaml``).
    """

    def freeze_before_training(self, pl_module) -> None:
        encoder = cast("UnisentModule", pl_module).encoder
        self.freeze(encoder, train_bn=False)
        encoder.eval()
        # the eval-mode encoder is the point: silence Lightning's notice about it
        warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")

    def finetune_function(self, pl_module, epoch: int, optimizer) -> None:
        """Called at every training epoch start: Lightning puts the whole module in train mode before."""
        cast("UnisentModule", pl_module).encoder.eval()
