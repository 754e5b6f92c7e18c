"""The mathematics of Part I: self-attention networks and their paths, residuals and ranks, the bounds,
layer norm as matrices, Lipschitz constants, the adversary and trajectory tools. Imports nothing of the
runner."""
