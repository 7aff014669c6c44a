"""Lightning callbacks that recipes name under ``trainer.callbacks`` (class_path ``unisent.callbacks.<Name>``)."""

from __future__ import annotations

import warnings

from lightning.pytorch.callbacks import BaseFinetuning

__all__ = ["FreezeEncoder"]


class FreezeEncoder(BaseFinetuning):
    """Keep the encoder exactly as loaded: only the objectives' own parameters (their heads) train.

    The encoder's parameters get ``requires_grad=False`` before the optimiser is built and it runs in
    eval mode, so its pooled vectors stay the base model's while a head learns on top (e.g. GaussCSE's,
    ``recipes/gausscse/quickstart.yaml``).
    """

    def freeze_before_training(self, pl_module) -> None:
        self.freeze(pl_module.encoder, train_bn=False)
        pl_module.encoder.eval()
        # the eval-mode encoder is the point: silence Lightning's notice about it
        warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")

    def finetune_function(self, pl_module, current_epoch: int, optimizer) -> None:
        """Called at every training epoch start: Lightning puts the whole module in train mode before."""
        pl_module.encoder.eval()
