"""The extras: what the project adds around the core, each a package here with its own config groups
(``<name>/configs/``, on Hydra's search path through ``hydra_plugins/mha_extras``). An extra is chosen by
config: its parts are ``_target_`` nodes and Hydra callbacks that its configs name; importing it registers
nothing. The core imports none of them (``tests/test_structure.py``)."""
