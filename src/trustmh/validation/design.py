"""Which items a clinician rates: the sampling frame (a run's judged samples), the two designs (a
uniform draw, or one stratified by model, task and the judge's verdict) with each item's inclusion
probability, and a plan that gives every (model, task) it covers the ratings a calibrated value needs
(`plan_tasks`). The estimator that uses the ratings is calibration.py's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import MIN_RATED


DESIGNS = ("uniform", "stratified")


@dataclass(frozen=True)
class FrameRow:
    """An item the design may draw: one scored sample of a judged task."""

    model: str
    task: str
    item_id: str
    variant: str
    verdict: str  # the judge's value of the task's primary per-sample value (a stratum of the stratified draw)


@dataclass(frozen=True)
class Drawn:
    row: FrameRow
    stratum: str
    pi: float  # inclusion probability: n_h / M_h of its stratum


def stratum_of(row: FrameRow, design: str) -> str:
    return "all" if design == "uniform" else f"{row.model}\x1f{row.task}\x1f{row.verdict}"


def frame_items(frame: list[FrameRow]) -> int:
    """The items (task, item, variant) of a frame: what a uniform draw's probabilities are counted over."""
    return len({(r.task, r.item_id, r.variant) for r in frame})


MIN_PER_STRATUM = 5


def allocate(sizes: dict[str, int], n: int, floor: int = MIN_PER_STRATUM) -> dict[str, int]:
    """n items over strata of the given sizes: at least `floor` from each (all of a smaller one: the few
    replies a judge called harmful are rated, not left to chance), the rest in proportion to the strata's
    sizes (largest remainders), so that the weights 1/pi stay close to one another. Unequal allocations
    make a few heavily weighted ratings decide the estimate and its interval skewed."""
    n = min(n, sum(sizes.values()))
    floor_ = min(floor, n // max(len(sizes), 1))
    out = {h: min(floor_, m) for h, m in sizes.items()}
    left = n - sum(out.values())
    room = {h: sizes[h] - out[h] for h in sizes}
    while left > 0:
        total = sum(room.values())
        shares = {h: left * room[h] / total for h in room}
        whole = {h: min(room[h], int(shares[h])) for h in room}
        if not any(whole.values()):  # the last few: largest remainders first
            for h in sorted(room, key=lambda h: (-(shares[h] - int(shares[h])), h))[:left]:
                whole[h] = 1 if room[h] else 0
        for h, k in whole.items():
            out[h] += k
            room[h] -= k
            left -= k
    return out


def plan_tasks(sizes: dict[str, int], n: int, minimum: int = MIN_RATED) -> dict[str, int]:
    """How many of each task's items a uniform draw of n takes: a calibrated value needs `minimum` rated items
    of a model's task and at least one the judge alone rated, so each task first gets up to `minimum` (all
    but one of its items), then the rest goes in proportion to the tasks' sizes (`allocate`). With n under
    `minimum` per task the floor is what n allows, and the draw says which tasks fall short
    (`annotate.plan_notes`)."""
    room = {t: k - 1 if k > minimum else k for t, k in sizes.items()}
    return allocate(room, n, floor=minimum)


def draw(frame: list[FrameRow], n: int, design: str, seed: int) -> list[Drawn]:
    """A seeded draw without replacement. Uniform: n items (a task's item and variant) over the tasks as
    `plan_tasks` sets (each task's n_t uniformly out of its K_t items), every model's reply to each drawn item
    with it, so each reply of a task has probability n_t / K_t and two models are rated on the same items
    (what a paired difference needs). Stratified by model, task and the judge's
    verdict: n replies over each model's tasks as `plan_tasks` sets, then over the task's verdicts (`allocate`),
    stratum h giving n_h of its M_h, pi = n_h / M_h. The
    probabilities depend on the design and the judge's verdicts only, never on a human rating, which is
    what makes the weighted estimate unbiased."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}")
    rows = sorted(frame, key=lambda r: (r.task, r.item_id, r.variant, r.model))
    rng = np.random.default_rng([seed, 3])
    if design == "uniform":
        by_task: dict[str, list[tuple[str, str, str]]] = {}
        for key in sorted({(r.task, r.item_id, r.variant) for r in rows}):
            by_task.setdefault(key[0], []).append(key)
        counts = plan_tasks({t: len(v) for t, v in by_task.items()}, n)
        chosen: dict[tuple[str, str, str], float] = {}
        for t in sorted(by_task):
            items, k = by_task[t], counts[t]
            for i in rng.choice(len(items), size=k, replace=False).tolist():
                chosen[items[i]] = k / len(items)
        return [Drawn(r, "all", chosen[key]) for r in rows if (key := (r.task, r.item_id, r.variant)) in chosen]
    strata: dict[str, list[FrameRow]] = {}
    for row in rows:
        strata.setdefault(stratum_of(row, design), []).append(row)
    # first each model's task (at least what a calibrated value needs, as a uniform draw plans its tasks), then
    # its verdicts (at least MIN_PER_STRATUM each, the rest in proportion)
    groups: dict[tuple[str, str], dict[str, int]] = {}
    for h, rs in strata.items():
        groups.setdefault((rs[0].model, rs[0].task), {})[h] = len(rs)
    per_group = plan_tasks({f"{m}\x1f{t}": sum(g.values()) for (m, t), g in groups.items()}, n)
    counts = {h: k for (m, t), g in groups.items() for h, k in allocate(g, per_group[f"{m}\x1f{t}"]).items()}
    out = []
    for h in sorted(strata):
        rs, k = strata[h], counts[h]
        if k:
            for i in sorted(rng.choice(len(rs), size=k, replace=False).tolist()):
                out.append(Drawn(rs[i], h, k / len(rs)))
    return out
