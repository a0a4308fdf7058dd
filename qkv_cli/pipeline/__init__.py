"""The pipeline: compute(request) -> Result, routing to the seeded random-weights pipeline, a long document's band,
a batch or a checkpoint; ablation and cross-attention. Imports core, text and models; never a view or the CLI."""
