"""A durable stage store at a URL: every machine pushes each finished stage (and each run's results)
to it and pulls from it instead of rebuilding. Blobs are keyed by their sha256; a stage's record,
written last and never overwritten, is the only sign that it exists (docs/store.md)."""
