"""The head view's files shipped beside this module (package data) and the TensorBoard plugin's name: what the
page, the training callback's records and the plugin share, without TensorFlow."""

from importlib import resources

PLUGIN_NAME = "mha_attention"  # the TensorBoard plugin that owns the head-view summaries


def asset(name: str) -> str:
    """head_view.js / .css / .html and tensorboard_tab.js."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
