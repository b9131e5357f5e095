"""The run_record extra."""
