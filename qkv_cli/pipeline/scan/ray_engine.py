"""`qkv scan --engine ray`: the same blocks of texts as the local engine, scored by Ray actors.

One actor per worker CPU (at most one per block) loads the checkpoint once (qkv's loaders read the file's tensors
as they are needed) and scores blocks sent to it as tasks (pipeline.scan.score_block); Ray's ActorPool hands each
block to a free actor and returns the tables in corpus order, which this process writes as the same Parquet
shards (atomically; --resume skips the shards already written, as locally). At most two blocks per actor are in
flight, so the corpus is still read a block at a time.

Without --ray-address a local Ray instance starts on this machine (loopback only, no dashboard); with it, this
process joins the cluster there (e.g. `ray://head:10001`, or `auto` on a cluster node), whose workers need
qkv-cli installed and the checkpoint at the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from qkv_cli.errors import QkvError

INSTALL = "pip install 'qkv-cli[ray]'"
IN_FLIGHT = 2  # blocks per actor submitted ahead


def ray_module():
    try:
        import ray
    except ImportError:
        raise QkvError(f"--engine ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


class ScanWorker:
    """A Ray actor's state: the model, loaded once, and the plan; score(block) -> the block's shard table."""

    def __init__(self, model, dtype: str, plan):  # model: a checkpoint's path, or random weights (scan_toy.Toy)
        from qkv_cli.pipeline.checkpoint import load

        self.plan = plan
        self.model = load(model, dtype, max_memory=plan.max_memory) if isinstance(model, str) else model

    def score(self, job):
        from qkv_cli.pipeline.scan.block import score_block

        k, block = job
        return k, score_block(self.model, self.plan, block)


def start(ray, address: str | None):
    """Join the cluster at address, or start a local instance (2 CPUs at most, loopback, no dashboard)."""
    if ray.is_initialized():
        return
    import logging

    logging.getLogger("ray").setLevel(logging.ERROR)  # stderr holds errors only, not Ray's notes and warnings
    try:
        if address is None:
            import os

            cpus = max(1, min(2, os.cpu_count() or 1))
            ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                     configure_logging=False)  # fmt: skip
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError ...: one line
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise QkvError(f"--engine ray could not reach {where}: {first}") from None


def run_ray(model, plan, todo: Iterator[tuple[int, list]], write: Callable) -> None:
    """Score the blocks of todo on Ray actors; write(k, table) each, in corpus order."""
    ray = ray_module()
    from ray.util.actor_pool import ActorPool

    start(ray, plan.ray_address)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    Worker = ray.remote(num_cpus=1)(ScanWorker)
    from qkv_cli.pipeline.scan.toy import Toy

    spec = model if isinstance(model, Toy) else str(model.path)
    actors = [Worker.remote(spec, str(model.dtype), plan) for _ in range(max(1, cpus))]
    pool = ActorPool(actors)
    pending = 0
    try:
        for job in todo:
            pool.submit(lambda actor, j: actor.score.remote(j), job)
            pending += 1
            if pending >= IN_FLIGHT * len(actors):
                write(*_next(ray, pool))
                pending -= 1
        while pool.has_next():
            write(*_next(ray, pool))
    finally:
        for actor in actors:
            ray.kill(actor)


def _next(ray, pool):
    try:
        return pool.get_next()
    except ray.exceptions.RayTaskError as exc:  # a worker's QkvError (a text too long for the budget ...)
        cause = exc.cause if isinstance(getattr(exc, "cause", None), QkvError) else None
        if cause is not None:
            raise QkvError(str(cause)) from None
        raise
