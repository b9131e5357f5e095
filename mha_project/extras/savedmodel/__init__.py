"""``export=true``: the run's SavedModel beside ``model.keras``, which takes raw strings and returns class
probabilities and names (``export.py``), for TF Serving or ``tf.saved_model.load``."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.extending import RUN_FILES, SAVED_OUTPUTS, settings

EXPORT_DIR = "export"


@settings("")
@dataclass
class ExportSettings:
    export: bool = MISSING  # false: model.keras only (not the run's identity: the model is the same)


def write_savedmodel(cfg, run_dir, model, inputs) -> None:
    if not cfg.export:
        return
    from mha_project.extras.savedmodel.export import export_inference_model

    export_inference_model(
        model,
        inputs.preprocessor,
        run_dir / EXPORT_DIR,
        class_names=inputs.data.class_names,
    )


SAVED_OUTPUTS.append(write_savedmodel)
RUN_FILES.append(EXPORT_DIR)
