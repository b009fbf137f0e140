"""Floor *store*: writes and trust transitions, and what runs over them."""
