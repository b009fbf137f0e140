"""Floor *format*: how an entry, a trailer, a proposal and a quorum are written."""
