"""Reading trained runs back and looking inside: attention, head patterns and importance, views."""
