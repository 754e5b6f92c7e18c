"""Part III: the small byte-level LM, its training with collapse detection and loss terms, the gradient
path, and the runs the repair chapters share through the store. Imports nothing of the runner."""
