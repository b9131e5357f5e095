import dataclasses
import re

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import OUT_OF_RANGE, ROOT, compose_cfg, run_script
from mha_project.config import validate_config
from mha_project.errors import ConfigError

CONFIGS = ROOT / "configs"


def compose_train(*overrides):
    return compose_cfg(*overrides, "run_dir=/tmp/not-written")


def group_options(group: str) -> list[str]:
    """The group's options in configs/ and in every extra's configs/ (hydra_plugins/mha_extras)."""
    folders = [CONFIGS / group, *(ROOT / "mha_project" / "extras").glob(f"*/configs/{group}")]
    return sorted(p.stem for folder in folders for p in folder.glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "group",
    ["data", "model", "model/backbone", "trainer", "trainer/strategy", "logger", "experiment", "hparams_search"],
)
def test_every_option_of_every_group_composes(group):
    options = group_options(group)
    if group == "experiment":
        assert options, f"no {group} options"
    for option in options:
        overrides = [f"{group}={option}"]
        if option == "folder":
            overrides.append("data.path=/some/dir")
        if (group, option) == ("model/backbone", "none"):  # no encoder: the bag of n-grams alone
            overrides.insert(0, "model=wide_deep")
        cfg = compose_train(*overrides)
        OmegaConf.resolve(cfg)  # every interpolation resolves
        assert cfg.model.backbone is None if option == "none" else cfg.model.backbone.num_heads >= 1


def test_every_shortcut_sets_the_keys_the_one_map_names():
    from mha_project.config import SHORTCUTS, TrainConfig

    values = {"heads": 8, "key_dim": 32, "value_dim": 16, "dropout": 0.2, "layers": 3, "embed_dim": 48}
    values |= {"ff_dim": 96, "seq_len": 77, "epochs": 5, "batch_size": 8, "lr": 0.01}
    assert set(values) == set(SHORTCUTS)
    cfg = compose_train(*(f"{k}={v}" for k, v in values.items()))
    for shortcut, keys in SHORTCUTS.items():
        for key in keys:
            assert OmegaConf.select(cfg, key) == values[shortcut], (shortcut, key)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(SHORTCUTS) <= fields  # the schema types each shortcut


def test_the_recorded_hparams_and_the_readme_list_follow_the_shortcut_map():
    from mha_project.config import SHORTCUTS, hparams_of

    cfg = compose_train("heads=8", "key_dim=16")
    recorded = hparams_of(cfg)
    assert all(
        recorded[name] == OmegaConf.select(cfg, keys[0]) for name, keys in SHORTCUTS.items() if name != "value_dim"
    )
    assert (recorded["heads"], recorded["key_dim"], recorded["value_dim"]) == (8, 16, 16)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = readme.split("Shortcuts you type without a group prefix:")[1].split(". Other knobs")[0]
    names = {n.strip("` \n") for n in re.sub(r"\([^)]*\)", "", listed).split(",")}
    assert names == set(SHORTCUTS) | {"seed", "deterministic"}


def test_shortcuts_reach_the_multi_head_attention_layers():
    from mha_project.model.backbone import encoder_blocks
    from mha_project.training.train import build_model

    cfg = compose_train("heads=8", "key_dim=32", "dropout=0.2", "layers=2", "seq_len=16")
    model = build_model(cfg, vocab_size=50, num_classes=2)
    blocks = encoder_blocks(model)
    assert len(blocks) == 2
    for block in blocks:
        mha = block.attention
        assert (mha.num_heads, mha.key_dim, mha.value_dim, mha.dropout) == (8, 32, 32, 0.2)


def test_wrong_type_is_refused_by_the_schema():
    with pytest.raises(Exception, match="heads"):
        compose_train("heads=abc")


@pytest.mark.parametrize(
    "override,key",
    [
        *((override, override) for override in OUT_OF_RANGE),
        ("trainer.precision=float8", "trainer.precision=float8"),
        ("trainer.monitor=accuracy", "trainer.monitor=accuracy"),
        ("model.backbone.embedding_norm=bogus", "model.backbone.embedding_norm=bogus"),
        ("model.pooling=max", "model.pooling=max"),
        ("data.truncation=middle", "data.truncation=middle"),
    ],
)
def test_out_of_range_values_name_key_value_and_allowed(override, key):
    cfg = compose_train(override)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    message = str(err.value)
    assert message.startswith(key) and "must be" in message and "\n" not in message


def test_defaults_are_valid():
    validate_config(compose_train())


@pytest.mark.slow
def test_the_schema_holds_types_only_and_every_value_is_in_the_yaml():
    import dataclasses

    from hydra.core.config_store import ConfigStore

    def stored(repo):  # every schema in Hydra's ConfigStore: the core's and the extras'
        for entry in repo.values():
            if isinstance(entry, dict):
                yield from stored(entry)
            elif str(getattr(OmegaConf.get_type(entry.node), "__module__", "")).startswith("mha_project"):
                yield OmegaConf.get_type(entry.node)

    schemas = set(stored(ConfigStore.instance().repo))
    assert len(schemas) > 15
    for schema in schemas:
        for f in dataclasses.fields(schema):
            if f.default_factory is not dataclasses.MISSING:
                assert dataclasses.is_dataclass(f.default_factory()), (schema.__name__, f.name)
            elif f.name not in ("tags", "backbone"):  # free-form, never read; backbone: its own group's
                assert f.default == "???", f"{schema.__name__}.{f.name} has a default in config.py: {f.default!r}"
    # ... so every value of a composed config comes from configs/ (a key missing there would raise here)
    for data in ("fine_foods", "imdb", "ag_news", "folder data.path=/some/dir"):
        cfg = compose_train(*f"data={data}".split())
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_a_padded_batch_too_large_for_memory_is_refused_with_the_number():
    # Attention's memory is estimated up front: seq_len=100000 without bucketing is one line, not an OOM.
    from mha_project.config import attention_memory_bytes

    with pytest.raises(ConfigError, match=r"^seq_len=100000 is invalid with data.bucketing=false here: .* GiB"):
        validate_config(compose_train("seq_len=100000", "data.bucketing=false"))
    validate_config(compose_train("seq_len=100000"))  # bucketed: batches pad only to their texts' bucket
    validate_config(compose_train("data.bucketing=false"))  # the default seq_len fits anywhere
    assert attention_memory_bytes(32, 4, 1, 128) == 3 * 32 * 4 * 128 * 128 * 4


@pytest.mark.slow
def test_help_offers_only_real_options_in_each_group():
    # `--help` offers only real options: the shared base file of data/ is not among them.
    listing = run_script("train.py", "--help").stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    groups = dict(line.split(": ", 1) for line in listing.splitlines() if ": " in line)
    assert {"fine_foods", "folder", "imdb", "ag_news"} <= set(groups["data"].split(", "))
    assert "data_common" not in listing and "common" not in groups["data"]


def test_the_base_install_holds_no_sweep_only_package_and_dev_brings_every_extra():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    for sweep_only in ("optuna", "sqlalchemy", "alembic", "joblib", "submitit", "pyarrow"):
        assert sweep_only not in base, sweep_only
    extras = project["optional-dependencies"]
    assert any(d.startswith("optuna>=4") for d in extras["sweep"]) and not any("<2" in d for d in extras["sweep"])
    included = extras["dev"][0].split("[", 1)[1].rstrip("]").split(",")
    assert set(included) == set(extras) - {"dev"}


@pytest.mark.parametrize(
    "overrides",
    [
        ("debug=tiny", "epochs=2", "data.limit=600"),
        ("experiment=wide_deep", "model.ngram_branch.c=0.1", "seed=3"),
        ("data=relations", "heads=4", "+extra_key=1"),
    ],
)
def test_the_tests_composed_config_is_hydras_own(overrides):
    # compose_cfg composes each list of group choices once and applies the value overrides to a copy.
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        hydras = compose(config_name="train", overrides=list(overrides))
    compose_cfg(*overrides)  # the second call is the cached one
    cached = compose_cfg(*overrides)
    assert OmegaConf.to_yaml(cached) == OmegaConf.to_yaml(hydras)
    assert OmegaConf.is_struct(cached) and cached is not compose_cfg(*overrides)
