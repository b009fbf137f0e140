"""Floor *git*: the repository under the store: objects, refs, locks, the work tree."""
