"""The NumPy core: the attention formula and its kernels, masks, embeddings, projections, settings, shapes,
the memory budget and statistics over weights. NumPy only (and qkv_cli.errors): no CLI, no files, no tokenizers.

Start reading at ``formula.py``: Att(Q, K, V) = Softmax(Q K^T / sqrt(d_k) + Mask) V, line for line.
"""
