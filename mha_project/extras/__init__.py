"""The extras: what the project adds around the core, each a package here that registers itself with the
core (``mha_project/extending.py``) when imported.

Importing this package imports every extra present, so deleting one's folder (and its config group and
tests) removes it and nothing else. Python's own plugin pattern (packaging guide, "Creating and discovering
plugins": a namespace walked with ``pkgutil``), as entry points would name a folder that may be gone.
"""

import importlib
import pkgutil

PRESENT = [extra.name for extra in pkgutil.iter_modules(__path__)]  # the extras' names: their folders
for _name in PRESENT:
    importlib.import_module(f"{__name__}.{_name}")
