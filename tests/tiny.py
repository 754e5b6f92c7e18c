"""Shared by the runner tests: the decomposition chapter at a size that runs in seconds."""

DECOMPOSITION = {
    "recon_layers": [1, 2],
    "recon_heads": [1, 2],
    "big_layers": 3,
    "big_heads": 2,
    "big_tokens": 8,
    "big_d": 16,
    "share_scales": [1.0],
    "share_seeds": 1,
}
