"""qkv patch: activation patching. Two cached runs and the sweep that recomputes only the layers from the patched
one (engine.py), the intervention points and their edits (hooks.py), which positions of the two prompts are paired
and where the answer is read (pairs.py), the metrics (metric.py), the choices of --what, --metric and --direction
(names.py), and what a sweep returns (result.py); an encoder-decoder's sweep over its encoder, decoder or
cross-attention, two sources and one teacher-forced target (encdec.py)."""
