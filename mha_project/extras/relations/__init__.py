"""``data=relations``: seeded tasks whose label is a relation between words (``tasks.py``), instantly
available offline, on which a bag of words stays at chance and attention does not; registered as a data
source with its settings, and with the rule's positions, so that head_patterns.py can name the head that
follows each relation. docs/seed_advice.md ("Where more heads are needed") has the measurements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from mha_project.config import checked, positive_int
from mha_project.errors import ConfigError
from mha_project.extending import HPARAMS, RELATION_LINKS, config_check, data_source, settings

TASK_NAMES = ("marker", "successor", "negation")  # tasks.TASKS, named here without importing numpy


@settings("data")
@dataclass
class RelationsSettings:
    # null outside data=relations: configs/relations/default.yaml
    task: Optional[str] = checked(lambda v: v is None or v in TASK_NAMES, "one of " + ", ".join(TASK_NAMES))
    examples: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    test_examples: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")


@data_source("relations")
def load_relations(data_cfg, seed: int):
    from mha_project.extras.relations.tasks import generate

    return generate(data_cfg.task, data_cfg.examples, data_cfg.test_examples, seed)


@config_check
def check_relations(cfg) -> None:
    data = cfg.data
    if data.name != "relations":
        if data.get("task") is not None:
            raise ConfigError(f"data.task={data.task} is read by data=relations only; data={data.name} has no tasks")
        return
    for key in ("task", "examples", "test_examples"):
        if data.get(key) is None:
            raise ConfigError(f"data=relations needs data.{key} (configs/data/relations.yaml sets it)")


def relation_links(data_cfg):
    """For a run on data=relations: ``links(words) -> {relation: [(query position, key position), ...]}``."""
    if data_cfg.name != "relations":
        return None
    from mha_project.extras.relations.tasks import TASKS

    return TASKS[data_cfg.task][2]


RELATION_LINKS.append(relation_links)
HPARAMS["task"] = "data.task"  # the HParams dashboard tells the tasks of a relations sweep apart


def per_head(width: int, heads: int) -> int:
    """``${per_head:32,${heads}}``: each head's key_dim when ``heads`` heads share a width of ``width``."""
    if heads < 1 or width % heads:
        raise ConfigError(
            f"heads={heads} does not divide the attention width {width}: choose one of "
            + ", ".join(str(h) for h in range(1, width + 1) if width % h == 0)
        )
    return width // heads


def probes(task: str) -> list[str]:
    """``${relations_probes:${data.task}}``: two texts that differ where the task's relation is decided."""
    from mha_project.extras.relations.tasks import TASKS

    return list(TASKS[task][3]) if task in TASKS else []


# Resolvers (OmegaConf's own mechanism for computed values) for configs/data/relations.yaml.
OmegaConf.register_new_resolver("per_head", per_head, replace=True)
OmegaConf.register_new_resolver("relations_probes", probes, replace=True)
