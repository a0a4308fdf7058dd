"""`qkv scan --engine ray` on a local Ray instance (2 CPUs, loopback): the same table as the local engine, row for
row, including a scan resumed on Ray from shards the local engine wrote. One Ray start for the module (seconds)."""

from __future__ import annotations

import shutil

import pytest
from scanning import SENTENCES, corpus_file, require
from tiny import make_checkpoint

import qkv_cli as qkv


@pytest.fixture(scope="module")
def ray():
    ray = require("ray")
    require("pyarrow")
    yield ray
    if ray.is_initialized():
        ray.shutdown()


def test_the_ray_scan_equals_the_local_scan_and_resumes_the_same(ray, tmp_path):
    model = make_checkpoint(tmp_path / "bert", "bert")
    corpus = corpus_file(tmp_path, [s for _ in range(3) for s in SENTENCES] + ["", "the cat"])
    local = qkv.scan(corpus, model=str(model), out=tmp_path / "local", shard_size=4, to="the,.")
    on_ray = qkv.scan(corpus, model=str(model), out=tmp_path / "ray", shard_size=4, to="the,.", engine="ray")
    assert ray.is_initialized()
    assert on_ray.table.equals(local.table) and on_ray.table.num_rows == 31 * 2 * 4
    assert on_ray.summary == local.summary | {"corpus": on_ray.summary["corpus"]}
    half = tmp_path / "half"  # a scan stopped halfway by the local engine, resumed on Ray
    shutil.copytree(tmp_path / "local", half)
    for name in ("part-000002.parquet", "part-000005.parquet", "part-000007.parquet", "summary.json"):
        (half / name).unlink()
    resumed = qkv.scan(corpus, model=str(model), out=half, shard_size=4, to="the,.", engine="ray", resume=True)
    assert resumed.progress.done == 12 and resumed.progress.skipped == 20
    assert resumed.table.equals(local.table)
