"""GGUF files (llama.cpp): the header, the reader, its metadata and tensors under Hugging Face names, and the
architectures whose names need their own module. May import models.quants and the rest of models.formats.
"""
