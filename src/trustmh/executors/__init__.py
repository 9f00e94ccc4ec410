"""Where phase 1 (getting replies and judgements) runs: `local` (this process, the default) or `ray`
(shards of the work as Ray tasks, on one machine or a cluster). Phase 2 always runs here, from the
run's store, so the results do not depend on the executor."""

from __future__ import annotations

from typing import Callable

from ..errors import UserError

EXECUTORS = ("local", "ray")


def make_executor(name: str, *, ray_address: str | None = None, shard_size: int | None = None) -> Callable | None:
    """None for the local executor (runner.run's own loop); else a phase-1 function for runner.run."""
    if shard_size is not None and shard_size < 1:
        raise UserError(f"--shard-size must be at least 1, not {shard_size}")
    if name == "local":
        if ray_address:
            raise UserError("--ray-address needs --executor ray")
        if shard_size is not None:
            raise UserError("--shard-size needs --executor ray")
        return None
    if name == "ray":
        from .ray_executor import RayExecutor  # ray itself is imported only when the run starts
        return RayExecutor(address=ray_address, units_per_shard=shard_size)
    raise UserError(f"--executor must be one of {', '.join(EXECUTORS)}, not '{name}'")


__all__ = ["EXECUTORS", "make_executor"]
