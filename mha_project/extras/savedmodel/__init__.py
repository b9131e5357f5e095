"""The savedmodel extra."""
