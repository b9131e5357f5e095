"""``model/backbone=rotary``: no learned position table; each head's queries and keys are rotated by their
position inside attention (RoFormer), so attention scores depend on relative positions only
(``attention.py``: ``RotaryEncoderBackbone``, the ``_target_`` of ``configs/model/backbone/rotary.yaml``).
docs/pretraining.md has the measurements."""
