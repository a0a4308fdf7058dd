"""qkv scan: every head's scores across a corpus. The plan and the local loop (engine.py), one block of texts
scored (block.py) through batched forward passes (batch.py), the scores (scores.py), the Parquet shards and resuming
(store.py), summary.json (summary.py), seeded random weights as a model (toy.py), the page's data (page.py), and the
same blocks on a Ray cluster (ray_engine.py)."""
