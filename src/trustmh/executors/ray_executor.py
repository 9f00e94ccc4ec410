"""Phase 1 on Ray: the run's work split into shards, each a Ray task running the normal runner.

A shard is one model and a range of items of one family: a task's samples and those of the robustness
task built on it (its clean samples are the very same requests, and its perturbed replies are judged in
the base item's context, so an identical reply asks the judge an identical body) for consecutive items.
Keeping a family together means a request, or a body, two tasks share is paid once, as in a local run;
so are families whose generations send one body (items that repeat another's text): they are one unit,
as a local run sends that body once. Each shard:

  * gets its samples (serialised; the nodes need no data directory) and the run store's rows for its
    items, with the bodies those answered, so nothing already stored is paid for again;
  * runs `engine.collect` (the same code as a local run: bounded, retried, cached) against a store of
    its own in a temporary directory;
  * returns the rows it wrote and the bodies they answered, which the driver merges into the run store
    as each shard finishes (`merge_shard`).

The merge is idempotent (rows are keyed by the hash of endpoint and request, and a stored success is
never replaced), so a shard that Ray runs again after a node failure adds no duplicate rows, and a
driver that dies loses only the shards still running: rerunning the command resumes. Phase 2 then runs
on the driver from the merged store, exactly as after a local run.

Nodes need trustmh installed and, for API models, their keys in the environment; replay files and hf/
model paths must exist on every node. A relative hf/ path is made absolute here, on the driver: Ray
workers run in the directory their `ray start` ran in, not the driver's (the model's identity is its
content, so the cache keys do not change). A --ray-address is tried with one TCP connection first:
ray.init would retry an address where nothing listens for minutes. --max-connections bounds each
shard: with K shards running at once an endpoint sees up to K times that many requests."""

from __future__ import annotations

import asyncio
import collections
import math
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs ray: pip install 'trustmh[ray]'") from None
    return ray


@dataclass
class Shard:
    model: str
    samples: dict[str, list[dict]] = field(default_factory=dict)  # task id -> serialised samples
    items: dict[str, set[str]] = field(default_factory=dict)  # request task -> item ids (for the seed rows)
    n: int = 0


def plan(spec, prepared, units_per_shard: int | None, cpus: int) -> list[Shard]:
    """Shards for every model: families of samples that share requests or bodies, cut into item ranges."""
    units = _units(spec, prepared)
    keys = list(units)
    size = units_per_shard or max(10, math.ceil(len(keys) / max(1, 4 * cpus)))
    shards = []
    for model in spec.models:
        for lo in range(0, len(keys), size):
            shard = Shard(model)
            for key in keys[lo:lo + size]:
                for task_id, s in units[key]:
                    shard.items.setdefault(s.request_task or s.task, set()).add(s.item.id)
                    shard.samples.setdefault(task_id, []).append(s.to_json())
                    shard.n += 1
            shards.append(shard)
    return shards


def _units(spec, prepared) -> dict[tuple[str, str], list[tuple[str, Any]]]:
    """(task id, sample) lists that must run in one shard, keyed by their first family item: a family's
    samples (see `_family`), joined with every other family whose generation sends one of its bodies (an
    item repeating another's text): a local run sends such a body once, and so must the shards."""
    from ..engine import generation_request
    parent: dict[tuple[str, str], tuple[str, str]] = {}  # union-find over units; a root is its set's first

    def root(u: tuple[str, str]) -> tuple[str, str]:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    order: dict[tuple[str, str], int] = {}
    first_of_body: dict[str, tuple[str, str]] = {}
    members: list[tuple[tuple[str, str], str, Any]] = []
    for p in prepared:
        family = _family(p.task)
        for s in p.samples:
            unit = (family, s.item.id)
            parent.setdefault(unit, unit)
            order.setdefault(unit, len(order))
            a, b = root(unit), root(first_of_body.setdefault(generation_request(s, spec).body_key(""), unit))
            if a != b:
                parent[max(a, b, key=order.__getitem__)] = min(a, b, key=order.__getitem__)
            members.append((unit, p.task.id, s))
    units: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for unit in order:  # in the order units first appear: shards keep run order
        units.setdefault(root(unit), [])
    for unit, task_id, s in members:
        units[root(unit)].append((task_id, s))
    return {k: v for k, v in units.items() if v}


def _family(task) -> str:
    """The task whose items a task's samples are variants of: a robustness task's base task (its clean
    samples are the base task's requests, and its perturbed replies are judged with the base's context, so
    a judge body can be asked by both), else the task itself."""
    return getattr(task, "base_id", None) or task.id


def run_shard(spec_json: dict, model: str, samples: dict[str, list[dict]], all_ids: dict[str, list[str]],
              seed_rows: list[tuple], limits_json: dict, includes: list[str] = (),
              seed_bodies: list[tuple[str, str]] = ()) -> tuple[list[tuple], list[tuple], dict[str, int], list[tuple]]:
    """On a Ray worker: collect one shard into a store of its own; return the rows it wrote (calls, links,
    calls made, and the bodies its calls answered). `includes`: the --include files of the run, whose tasks
    and providers the worker's own process must import too; `seed_bodies`: the bodies the seed rows
    answered, so that a body the run store has answered is not paid again here."""
    from .. import engine
    from ..plugins import load
    load(includes)
    from ..engine import Store
    from ..tasks import resolve_tasks
    from ..types import Sample

    spec = engine.RunSpec.from_json(spec_json)
    spec.models = [model]
    ctx = engine.context(spec)
    prepared = [engine.Prepared(resolve_tasks(task_id)[0], samples=[Sample.from_json(s) for s in rows],
                                all_ids=set(all_ids.get(task_id, ())))
                for task_id, rows in samples.items()]
    with tempfile.TemporaryDirectory(prefix="trustmh-shard-") as tmp:
        store = Store(Path(tmp) / "shard.sqlite")
        try:
            store.merge_calls(seed_rows)
            store.merge_bodies(list(seed_bodies))
            started = time.time()
            calls = asyncio.run(engine.collect(spec, ctx, prepared, store, engine.Limits(**limits_json)))
            # The shard's store is its own: every link in it is this shard's.
            links = store.db.execute(f"SELECT {LINKS} FROM links").fetchall()
            rows = [r for r in store.call_rows() if r[15] >= started]
            return rows, links, calls, store.body_rows(r[0] for r in rows)
        finally:
            store.close()


LINKS = "model, task, item_id, variant, rubric, judge, key, version"


def merge_shard(store, result) -> dict[str, int]:
    """A finished shard's calls, links and answered bodies into the run store (idempotent: a shard Ray runs
    again adds nothing); returns the calls it made. The bodies go in after the calls they point at, so a
    later shard or run asking one of them takes its reply instead of paying."""
    rows, links, calls, bodies = result
    store.merge_calls(rows)
    store.put_links(links)
    store.merge_bodies(bodies)
    return calls


def check_address(address: str | None, timeout: float = 3.0) -> None:
    """A UserError within `timeout` seconds when nothing listens at a host:port or ray://host:port address
    ("auto" and no address are left to Ray, which answers those at once)."""
    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(f"--ray-address must be auto, host:port or ray://host:port, not '{address}'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise UserError(f"cannot reach a Ray cluster at {address}: {e.strerror or e} (is `ray start --head` "
                        f"running there, and is the port open?)") from None


def absolute_spec(model: str) -> str:
    """hf/<relative folder> as hf/<absolute folder>, for workers whose working directory is not ours."""
    from ..models.hf_files import is_local
    provider, _, name = model.partition("/")
    if provider == "hf" and is_local(name):
        return f"hf/{Path(name).expanduser().resolve()}"
    return model


class RayExecutor:
    def __init__(self, address: str | None = None, units_per_shard: int | None = None):
        check_address(address)
        self.address, self.units_per_shard = address, units_per_shard

    def __call__(self, spec, ctx, prepared, store, limits, *, events=None) -> dict[str, int]:
        ray = _import_ray()
        from .. import engine
        from ..plugins import included
        events = events or engine.ignore

        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, include_dashboard=False, logging_level="WARNING")
            except ConnectionError as e:
                raise UserError(f"cannot reach a Ray cluster at {self.address}: {e}") from None
        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            gpus = ray.cluster_resources().get("GPU", 0)
            shards = plan(spec, prepared, self.units_per_shard, cpus)
            replay = any(m.startswith("replay/") for m in [*spec.models, spec.judge])
            all_ids = {p.task.id: sorted(p.all_ids) for p in prepared if replay and not p.not_run}
            limits_json = dict(limits.__dict__)
            spec_json = spec.to_json()
            spec_json["judge"] = absolute_spec(spec.judge)
            shipped = {m: absolute_spec(m) for m in spec.models}
            task = ray.remote(run_shard)
            refs = {}
            for shard in shards:
                seed = [r for req_task, ids in shard.items.items() for r in store.call_rows(req_task, ids)]
                seed_bodies = store.body_rows(r[0] for r in seed)
                options = {"num_cpus": 1, "max_retries": 3}
                if shard.model.startswith("hf/") and gpus:
                    options["num_gpus"] = 1
                ref = task.options(**options).remote(spec_json, shipped[shard.model], shard.samples,
                                                     {t: all_ids[t] for t in shard.samples if t in all_ids},
                                                     seed, limits_json, included(), seed_bodies)
                refs[ref] = shard
            calls: collections.Counter = collections.Counter()
            label, total, done_n = f"ray: {len(shards)} shards", sum(s.n for s in shards), 0
            events(engine.PhaseStarted("generate", label, total))
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    result = ray.get(done[0])
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, (UserError, engine.AuthFailure, engine.EndpointDown)):
                        raise cause from None
                    raise
                shard_calls = merge_shard(store, result)  # a driver that dies keeps the finished shards
                model = refs[done[0]].model
                calls.update({model if k == shipped[model] else k: v for k, v in shard_calls.items()})
                done_n += refs[done[0]].n
                events(engine.PhaseProgress("generate", label, done_n, total))
            events(engine.PhaseDone("generate", label))
            return {m: calls.get(m, 0) for m in spec.models} | ({"judge": calls["judge"]} if "judge" in calls else {})
        finally:
            if started_here:
                ray.shutdown()
