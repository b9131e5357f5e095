"""The head view's files shipped beside this module (package data) and the smallest weight it draws: what the
page and the TensorBoard plugin share, without TensorFlow."""

from importlib import resources

MIN_WEIGHT = 0.02  # lines for smaller weights are not drawn in the head view's all-queries view


def asset(name: str) -> str:
    """head_view.js / .css / .html and tensorboard_tab.js."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
