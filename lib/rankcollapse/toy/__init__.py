"""The toy networks of Figures 3 and 4: the networks, their tasks and data, and their training (seeded,
checkpointed, cached in the store). Imports nothing of the runner."""
