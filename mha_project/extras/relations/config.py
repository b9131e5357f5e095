"""``data=relations``' settings (``RelationsData``'s arguments) and their checks, and the resolvers its config uses;
no NumPy, no TensorFlow."""

from dataclasses import dataclass

from omegaconf import MISSING, OmegaConf

from mha_project.config import DataConfig, checked, one_of, positive_int, store
from mha_project.errors import ConfigError

# Per task (tasks.TASKS), two texts that differ where its relation is decided: the runs' attention probes.
PROBES = {
    "marker": ["one five two four is four six zero seven three", "one five two four is six six zero seven three"],
    "successor": ["six one zero two then three five seven four", "six one zero three then two five seven four"],
    "recall": ["cat five and dog two eel seven and ant four dog", "dog five and cat two eel seven and ant four dog"],
    "negation": ["the soup was not really bad today", "the soup was also really bad today"],
}
TASK_NAMES = tuple(PROBES)
# Per task, the words a text needs for its rule to be read wherever it stands (tasks.py): shorter is truncated.
TEXT_WORDS = {"marker": 16, "successor": 16, "recall": 16, "negation": 6}
# Per task, what configs/data/relations.yaml sets: recall learns after a plateau (more texts, no early stop in it)
# and is read from its last word by a causal encoder: one layer cannot look up a value there (with pooling over
# every word it can), and a key cannot read the value after it (the look-up must go through the previous word).
SETTINGS = {"examples": 20000, "epochs": 10, "patience": 2, "pooling": "mean_max", "causal": False}
TASK_SETTINGS = {"recall": {"examples": 100000, "epochs": 6, "patience": 3, "pooling": "last", "causal": True}}
# Texts are generated in memory at once: past this a run would fail for memory, not teach anything more.
MAX_EXAMPLES = 10_000_000


def _examples(v) -> bool:
    return positive_int(v) and v <= MAX_EXAMPLES


@dataclass
class RelationsDataConfig(DataConfig):
    task: str = checked(lambda v: v in TASK_NAMES, one_of(TASK_NAMES))
    examples: int = checked(_examples, f"an integer from 1 to {MAX_EXAMPLES}")
    test_examples: int = checked(_examples, f"an integer from 1 to {MAX_EXAMPLES}")
    model_setting: str = MISSING  # what data=relations set in the model, said in the run's first lines

    @staticmethod
    def check(data, cfg) -> None:
        words = TEXT_WORDS[data.task]
        if data.seq_len < words:
            raise ConfigError(
                f"data.seq_len={data.seq_len} is too short for data.task={data.task}: its rule can stand at word "
                f"{words} of a text, and a model that never sees it stays at chance; give seq_len >= {words}"
            )


store("relations_schema", RelationsDataConfig, at="data")


def per_head(width: int, heads: int) -> int:
    """``${per_head:64,${heads}}``: each head's key_dim when ``heads`` heads share a width of ``width``."""
    if heads < 1 or width % heads:
        raise ConfigError(
            f"heads={heads} does not divide the attention width {width}: choose one of "
            + ", ".join(str(h) for h in range(1, width + 1) if width % h == 0)
        )
    return width // heads


# Resolvers (OmegaConf's own mechanism for computed values) for configs/data/relations.yaml.
OmegaConf.register_new_resolver("per_head", per_head, replace=True)
OmegaConf.register_new_resolver(
    "relations_setting", lambda task, key: TASK_SETTINGS.get(task, {}).get(key, SETTINGS[key]), replace=True
)
OmegaConf.register_new_resolver("relations_probes", lambda task: list(PROBES.get(task, [])), replace=True)
