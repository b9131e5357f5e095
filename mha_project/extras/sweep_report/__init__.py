"""The sweep_report extra."""
