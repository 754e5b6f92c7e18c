"""Figure 2 and Q2: Hugging Face models loaded offline and the surgery that makes their four variants
(SAN, SAN+MLP, SAN+skip, transformer). Imports nothing of the runner."""
