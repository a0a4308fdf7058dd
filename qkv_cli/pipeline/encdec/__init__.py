"""An encoder-decoder checkpoint (T5, BART, Marian) through the pipeline: the teacher-forced run and the writing
(run.py), what qkv heads, attribute and mask do on it (inspection.py), and its matrices for qkv shapes (shapes.py)."""
