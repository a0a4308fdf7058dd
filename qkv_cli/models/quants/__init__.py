"""GGUF block types dequantized with NumPy: one kernel per ggml type, in a registry (dequantize.KERNELS). Imports
nothing else of models.
"""
