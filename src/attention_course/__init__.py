"""Attention, step by step: the reference implementation the course notebooks import.

One module per concept, in lesson order:

- ``embeddings`` (01): one-hot lookup, sinusoidal positions, token + position embedding
- ``attention`` (02): stable softmax, scores, scaled dot-product attention
- ``masks`` (03): causal and padding masks, applying masks, mask conventions
- ``multihead`` (04): splitting and merging heads, ``MultiHeadAttention``
- ``model``, ``data``, ``training`` (05): a small decoder-only transformer on a copy task

Shared helpers: ``device`` (CPU/GPU choice) and ``viz`` (plots).
"""

__version__ = "0.1.0"
