"""The head view's one setting: ``head_view.html`` (``attention.html`` in every run dir); no TensorFlow."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.config import store


@dataclass
class HeadViewConfig:
    html: bool = MISSING  # attention.html in the run dir: the probes' head view


store("head_view_schema", HeadViewConfig, at="head_view")
