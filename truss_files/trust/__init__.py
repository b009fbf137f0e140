"""Floor *trust*: who may do what, and whether the history says they did."""
