"""The objective contract: hooks declared on the base class with their defaults, metrics apart from
loss terms, class-level default names, and the batch schema shared with ``unisent predict``."""

from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch

from unisent.data import UnisentDataModule
from unisent.data.schema import PREDICT_SCHEMA
from unisent.encoders import EncoderConfig
from unisent.lightning_module import UnisentModule
from unisent.objectives import (
    CMLM,
    EASE,
    AMRSimCSE,
    BatchSchema,
    BitextRetrieval,
    GaussCSE,
    NLIClassifier,
    Objective,
    ObjectiveOutput,
    SimCSE,
    encode_views,
)

#: the repository's training, benchmark and test samples (not in the wheel)
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "samples"


class AlignUniformObjective(Objective):
    """No name of its own: the snake-case fallback (``align_uniform``)."""

    batch_keys = text_keys = ("text",)

    def forward(self, encoder, batch):
        (z,) = encode_views(encoder, batch, ("text",))
        return {"spread": -torch.pdist(z).mean()}  # a plain dict of terms: the form third parties use


class WithMetrics(Objective):
    name = "metered"
    batch_keys = text_keys = ("text",)

    def forward(self, encoder, batch):
        z1, z2 = encode_views(encoder, batch, ("text",), repeat=2)
        loss = (z1 - z2).pow(2).sum(-1).mean()
        return ObjectiveOutput(
            terms={"distance": loss}, metrics={"norm": z1.detach().norm(dim=-1).mean(), "batch": 8.0}
        )


def test_built_ins_name_themselves_on_the_class_and_others_fall_back_to_snake_case():
    expected = {
        SimCSE: "simcse",
        GaussCSE: "gausscse",
        EASE: "ease",
        AMRSimCSE: "amr",
        CMLM: "cmlm",
        NLIClassifier: "nli",
        BitextRetrieval: "bitext",
    }
    for cls, name in expected.items():
        assert cls.name == name and cls.default_name() == name
    assert SimCSE().name == "simcse" and SimCSE(name="sup").name == "sup" and SimCSE.name == "simcse"
    assert AlignUniformObjective().name == "align_uniform"  # the trailing _objective goes
    assert SimCSE().config()["init_args"]["name"] is None  # checkpoints record what was passed, as before

    class MySimCSE(SimCSE):
        pass

    assert MySimCSE().name == "simcse"  # a subclass inherits the class name, as it did through __init__


def test_hooks_are_declared_on_the_base_with_their_defaults(tiny_bert_dir):
    module = UnisentModule(encoder=EncoderConfig(model=str(tiny_bert_dir)), objectives=[AlignUniformObjective()])
    objective = module.objectives[0]
    assert objective.setup_for(module.encoder) is None
    assert objective.setup_data([1, 2]) is None
    assert objective.inference_model(module.encoder) is None
    assert module.inference_model() is module.encoder
    # CMLM keeps the plain encoder unless its "proj" variant is on, and does not mask another's head
    gauss = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_bert_dir)), objectives=[CMLM(num_projections=1), GaussCSE()]
    )
    assert gauss.objectives[0].inference_model(gauss.encoder) is None
    assert type(gauss.inference_model()).__name__ == "GaussianEncoder"
    proj = CMLM(num_projections=2, proj=True)
    proj.setup_for(gauss.encoder)
    assert type(proj.inference_model(gauss.encoder)).__name__ == "ProjectionEncoder"


def test_an_objective_missing_a_required_method_is_refused_when_built():
    """The contract: ``forward``, or ``embed`` and ``loss``; before the check each of these was built and failed
    at its first training step with "implements forward, not embed and loss", wrong for the first two."""

    class EmbedOnly(Objective):
        def embed(self, encode, batch):
            return encode_views(encode, batch, ("text",))

    class LossOnly(Objective):
        def loss(self, views, batch):
            return {"zero": views[0].sum() * 0}

    class Nothing(Objective):
        batch_keys = text_keys = ("text",)

    class ForwardAndLoss(Objective):  # loss as a helper of forward: not in-batch, allowed
        def forward(self, encoder, batch):
            return self.loss([], batch)

        def loss(self, views, batch):
            return {"zero": torch.zeros(())}

    for cls, missing in (
        (EmbedOnly, "loss"),
        (LossOnly, "embed"),
        (Nothing, "embed and loss"),
        (Objective, "embed and loss"),
    ):
        with pytest.raises(
            TypeError, match=f"^{cls.__qualname__} does not implement {missing}: an objective implements forward"
        ):
            cls()
    assert not ForwardAndLoss().in_batch and ForwardAndLoss().total(ForwardAndLoss()(None, {})) == 0
    with pytest.raises(ValueError, match="objective 'align_uniform' returned no loss terms"):
        AlignUniformObjective().total({})


def test_objective_output_is_its_terms_and_keeps_metrics_apart():
    loss, acc = torch.tensor(2.0), torch.tensor(0.5)
    out = ObjectiveOutput(terms={"loss": loss}, metrics={"accuracy": acc})
    assert dict(out) == {"loss": loss} and out["loss"] is loss and len(out) == 1
    assert SimCSE().total(out) == loss  # the metric never counts
    plain = ObjectiveOutput.of({"loss": loss})
    assert plain.terms == {"loss": loss} and plain.metrics == {}
    assert ObjectiveOutput.of(out) is out
    with pytest.raises(ValueError, match="accuracy is both a loss term and a metric"):
        ObjectiveOutput.of(ObjectiveOutput({"accuracy": loss}, {"accuracy": acc}))
    with pytest.raises(TypeError, match="dict of loss terms or an ObjectiveOutput, got Tensor"):
        ObjectiveOutput.of(loss)


def test_metrics_are_logged_and_stay_out_of_the_loss(tiny_model_dir, tmp_path):
    module = UnisentModule(
        encoder=EncoderConfig(model=str(tiny_model_dir)), objectives=[WithMetrics(), AlignUniformObjective(weight=0.5)]
    )
    data = UnisentDataModule(
        train={"metered": str(SAMPLE_DIR / "sentences.txt"), "align_uniform": str(SAMPLE_DIR / "sentences.txt")},
        batch_size=8,
    )
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        max_steps=3,
    )
    trainer.fit(module, datamodule=data)
    metrics = pd.read_csv(next(tmp_path.glob("run/version_*/metrics.csv"))).dropna(subset=["train/loss"])
    assert len(metrics) == 3
    assert (metrics["train/metered/norm"] > 0).all() and (metrics["train/metered/batch"] == 8.0).all()
    total = metrics["train/metered/distance"] + 0.5 * metrics["train/align_uniform/spread"]
    assert (total - metrics["train/loss"]).abs().max() < 1e-4  # norm and batch are not in the loss


def test_batch_schema_is_what_objectives_and_predict_batch_by():
    schema = SimCSE(supervised=True, max_length=16).schema
    assert schema == BatchSchema(("anchor", "positive", "negative"), ("anchor", "positive", "negative"), (), 16)
    assert EASE().schema.optional_keys == ("hard_negative",)
    assert PREDICT_SCHEMA.batch_keys == PREDICT_SCHEMA.text_keys == ("text",)
    batch = PREDICT_SCHEMA.collate([{"text": [5, 6, 7]}, {"text": [5]}], pad_id=0)
    assert batch["text"]["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch["text"]["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    nli = NLIClassifier().schema.collate([{"premise": [1], "hypothesis": [2, 3], "label": 0}], pad_id=0)
    assert nli["premise"]["input_ids"].shape == (1, 2) and nli["label"].tolist() == [0]
    with pytest.raises(ValueError, match=r"text_keys \['b'\] are not in batch_keys \['a'\]"):
        BatchSchema(("a",), ("b",))
