"""Attention, step by step: the reference implementation the course notebooks import.

One module per concept, in lesson order (``lessons`` is the registry of lessons):

- ``embeddings`` (01): one-hot lookup, sinusoidal positions, token + position embedding
- ``attention`` (02): stable softmax, scores, scaled dot-product attention
- ``masks`` (03): causal and padding masks, applying masks, mask conventions
- ``multihead`` (04): splitting and merging heads, ``MultiHeadAttention``
- ``model``, ``data``, ``training`` (05): a small decoder-only transformer on a copy task
- ``rope``, ``lengths`` (06): rotary position embeddings, and the length experiment
- ``inference``, ``tiled`` (07): key/value caching, grouped-query attention, tiled attention

Shared helpers: ``device`` (CPU/GPU choice), ``viz`` (plots), ``checks`` (the feedback a
student's practice cell gets) and ``restart`` (what a NameError after a kernel restart says).
"""

__version__ = "0.1.0"
