"""The encoder-decoder families (T5, mT5, UMT5, BART, Marian) over the shared encoder-decoder layers
(models.layers.encdec).
"""
