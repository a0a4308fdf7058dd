"""`qkv scan`: the heads' scores over a corpus, shard by shard (pipeline.scan.store), resumable at any moment.

    for each block of S texts (in corpus order) not yet in DIR:
        tokens of each text (cut to --max-tokens) -> the forward pass (pipeline.scan.batch) -> scan_scores
        -> one Parquet shard, written atomically
    then summary.json from the shards (pipeline.scan.summary)

The local engine is this plain loop; `--engine ray` (pipeline.scan.ray_engine) sends the same blocks to Ray actors. The
memory it holds is one block's rows and one batch's forward pass, whatever the corpus's size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.pipeline.scan.scores import Measures
from qkv_cli.text.corpus import Record

ENGINES = ("local", "ray")
DEFAULT_SHARD = 256


@dataclass(frozen=True)
class ScanPlan:
    """Everything a scan does, checked at construction (a worker receives it as is)."""

    corpus: str
    out: str
    model: str
    measures: Measures = field(default_factory=Measures)
    field: str = "text"
    limit: int | None = None
    max_tokens: int | None = None
    strict: bool = False
    chat: object = None  # a pipeline.chat.Chat
    kernel: str = "vectorized"
    dtype: str = "float64"
    shard_size: int = DEFAULT_SHARD
    batch_tokens: int = 512
    max_memory: int | None = None
    engine: str = "local"
    ray_address: str | None = None
    resume: bool = False

    def __post_init__(self):
        for name in ("limit", "max_tokens", "shard_size", "batch_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise QkvError(f"--{name.replace('_', '-')} must be a whole number of at least 1, got {value!r}")
        if self.strict and self.max_tokens is None:
            raise QkvError("--strict records texts past --max-tokens as unreadable: give --max-tokens N too")
        if self.engine not in ENGINES:
            raise QkvError(f"unknown engine {self.engine!r}: choose one of {', '.join(ENGINES)}")
        if self.ray_address is not None and self.engine != "ray":
            raise QkvError("--ray-address joins a Ray cluster: add --engine ray")

    def manifest(self, model) -> dict:
        """What must match for --resume to continue a scan (scan.json)."""
        from qkv_cli.pipeline.scan.toy import Toy

        c = model.config
        chat = None if self.chat is None else asdict(self.chat)
        return {"corpus": self.corpus, "field": self.field, "limit": self.limit, "model": model.name,
                "family": c.family, "layers": c.n_layers, "heads": c.n_heads, "dtype": str(model.dtype),
                "kernel": self.kernel, "max_tokens": self.max_tokens, "strict": self.strict, "chat": chat,
                "shard_size": self.shard_size, "columns": list(self.measures.columns),
                "detectors": self.measures.options,
                "random_weights": model.describe() if isinstance(model, Toy) else None}  # fmt: skip


@dataclass
class Progress:
    """What the caller is told after each shard: texts done (this run and before), the total when known."""

    done: int = 0
    skipped: int = 0
    total: int | None = None
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)


def blocks(plan: ScanPlan) -> Iterator[tuple[int, list[Record]]]:
    """(k, the records of texts k*S .. (k+1)*S - 1), read one block at a time."""
    from qkv_cli.text.corpus import records

    block, k = [], 0
    for record in records(plan.corpus, plan.field, plan.limit):
        if record.text_id // plan.shard_size != k:
            if block:
                yield k, block
            block, k = [], record.text_id // plan.shard_size
        block.append(record)
    if block:
        yield k, block


def run_local(model, plan: ScanPlan, todo: Iterator[tuple[int, list[Record]]], write: Callable) -> None:
    """The local engine: each block scored and written in turn."""
    from qkv_cli.pipeline.scan.block import score_block

    for k, block in todo:
        write(k, score_block(model, plan, block))


def scan(plan: ScanPlan, model, on_progress: Callable[[Progress], None] | None = None,
         total: int | None = None) -> tuple[dict, Progress]:  # fmt: skip
    """Run (or resume) the scan into plan.out; returns (the summary, pipeline.scan.summary's; this run's Progress).
    on_progress(progress): called after each shard is written."""
    from qkv_cli.pipeline.scan import store as scan_store
    from qkv_cli.pipeline.scan.block import check_memory

    model.tokenizer  # noqa: B018  (a missing tokenizer is one error for the scan, not one per text)
    check_memory(model, plan, min(plan.batch_tokens, model.config.max_positions))  # the largest batch, first
    manifest = plan.manifest(model)
    written = scan_store.prepare(plan.out, manifest, plan.resume)
    progress = Progress(total=total)

    def todo():
        for k, block in blocks(plan):
            if k in written:
                progress.skipped += len(block)
                continue
            yield k, block

    def write(k: int, table) -> None:
        scan_store.write_shard(plan.out, k, table)
        meta = table.schema.metadata
        progress.done += int(meta[b"qkv.records"])
        progress.tokens += int(np.sum(table.column("n_tokens").to_numpy())) // _heads(model)
        if on_progress is not None:
            on_progress(progress)

    if plan.engine == "ray":
        from qkv_cli.pipeline.scan.ray_engine import run_ray

        run_ray(model, plan, todo(), write)
    else:
        run_local(model, plan, todo(), write)
    return finish(plan.out, manifest), progress


def finish(out, manifest: dict) -> dict:
    """summary.json of the finished scan (pipeline.scan.summary), written atomically; returns it."""
    import json
    from pathlib import Path

    from qkv_cli.pipeline.scan.store import SUMMARY, write_atomic
    from qkv_cli.pipeline.scan.summary import summarize

    summary = summarize(out, manifest)
    if not summary["texts"]:
        first = summary["unreadable"][0]["problem"] if summary["unreadable"] else "no records"
        raise QkvError(f"corpus {manifest['corpus']!r} has no readable text ({summary['unreadable_count']} "
                       f"unreadable; the first: {first})")  # fmt: skip
    write_atomic(Path(out).expanduser() / SUMMARY, json.dumps(summary).encode())
    return summary


def _heads(model) -> int:
    return model.config.n_layers * model.config.n_heads
