"""Floor *config*: the settings table, and the judge specs and policies it parses."""
