"""`trustmh validate-judge --ratings FILE`: any human-rated set, judged with a task's rubric or one's own,
the judge measured against the humans per criterion with the human ceiling beside it.

The file holds one rating a line, CSV (a header row) or JSON Lines (one object a line), with the fields

    item       an id of the rated thing (a reply in its context); every line of an item holds the same
               context, reply and reference
    context    what the reply answers: the conversation so far, one turn a line as "Speaker: text"
               (seeker/supporter for reliability.support, client/counsellor for reliability.intervention;
               a line without a known speaker continues the turn before it), or free text for one's own rubric
    reply      the rated reply
    criterion  what was rated (a criterion of the rubric: fluency, empathy, ...)
    rater      who rated it (a human rater's id)
    rating     the rating, a whole number on the rubric's scale
    reference  (optional) a reference reply the rubric may show (reliability.support's "what the human
               supporter wrote next")

The judge rates each item once, on every criterion the file rates, through the engine's phase 1 as any
run's judgements are (stored, cached, retried, resumed: `validation.judge_given_replies`). A line that
cannot be used is left out and counted with its reason (no number, off the scale, a second rating of
the same item, criterion and rater, an item whose lines disagree on its texts); a file that cannot be
read at all is a one-line error. A judge failure leaves that item out of the judge's comparison only,
counted under its reason; it is never a rating."""

from __future__ import annotations

import collections
import csv
import datetime as dt
import io
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..scoring.agreement import STATS, CriterionAgreement, agreement_json, agreement_task_result, criterion_agreement
from ..data.loaders import file_sha256
from ..errors import UserError
from ..judges.parsing import extract_json_object, parse_int_scores
from ..judges.rubric import Rubric
from ..scoring.results import MetricValue, ModelResults, RunResults, TaskResult
from ..tasks.base import RunContext, Task, render_judge
from ..types import Item, Response, Sample

FIELDS = ("item", "context", "reply", "criterion", "rater", "rating")
MAX_FILE_BYTES = 64 << 20
MAX_LINES = 500_000
MAX_TEXT = 100_000  # characters of one context, reply or reference
MAX_NAME = 200  # characters of an item id, criterion or rater
MAX_TEMPLATE_BYTES = 64 << 10
TASK = "validate-judge"


@dataclass
class RatedItem:
    id: str
    context: str
    reply: str
    reference: str = ""


@dataclass
class RatedSet:
    items: dict[str, RatedItem]
    ratings: dict[str, dict[str, dict[str, float]]]  # criterion -> item -> rater -> rating
    left_out: collections.Counter = field(default_factory=collections.Counter)  # reason -> lines
    n_lines: int = 0


# --- rubrics ---------------------------------------------------------------------------------------

_SEEKER = {"seeker", "user", "usr", "client", "patient", "求助者"}
_HELPER = {"supporter", "assistant", "sys", "counsellor", "counselor", "therapist", "支持者"}
_TURN = re.compile(r"^\s*([^:：\n]{1,30})\s*[:：]\s?(.*)$")


def context_turns(context: str, seeker: str, helper: str) -> list[dict[str, str]]:
    """'Speaker: text' lines as turns; a line without a known speaker continues the turn before it (the
    first turn is the seeker's when no speaker is named)."""
    turns: list[dict[str, str]] = []
    for line in context.splitlines():
        m = _TURN.match(line)
        who = m.group(1).strip().lower() if m else ""
        if who in _SEEKER or who in _HELPER:
            turns.append({"speaker": seeker if who in _SEEKER else helper, "text": m.group(2).strip()})
        elif turns:
            turns[-1]["text"] = (turns[-1]["text"] + "\n" + line).strip()
        elif line.strip():
            turns.append({"speaker": seeker, "text": line.strip()})
    return turns


@dataclass
class RatingRubric:
    """How the judge is asked about one item: a task's rubric or the user's template, its criteria
    (None: whatever the file rates, on `scale`) and the scale of each."""

    name: str
    rubric: Rubric
    messages: Callable[[RatedItem, list[str]], list[dict[str, str]]]
    criteria: dict[str, tuple[int, int]] | None = None

    def scale(self, criterion: str, default: tuple[int, int]) -> tuple[int, int]:
        return self.criteria[criterion] if self.criteria else default


def _support(item: RatedItem, criteria: list[str]) -> list[dict[str, str]]:
    from ..tasks.labelled import support_judge_messages
    return support_judge_messages(context_turns(item.context, "seeker", "supporter"), item.reference, item.reply)


def _intervention(item: RatedItem, criteria: list[str]) -> list[dict[str, str]]:
    from ..tasks.reliability.common import CLIENT, COUNSELLOR
    history = context_turns(item.context, "client", "counsellor")
    return [{"role": "user", "content": render_judge("reliability_intervention_judge.j2", reply=item.reply,
                                                     history=history, client=CLIENT, counsellor=COUNSELLOR)}]


def task_rubrics() -> dict[str, RatingRubric]:
    """The named tasks whose judge rubric rates a reply in its context, under trustmh's protocol."""
    from ..tasks.reliability.common import INTERVENTION_CRITERIA
    from ..tasks.labelled import SUPPORT_CRITERIA
    return {
        "reliability.support": RatingRubric("reliability.support", Rubric("judge", ("reliability_support_judge.j2",)),
                                            _support, {c: (0, 5) for c in SUPPORT_CRITERIA}),
        "reliability.intervention": RatingRubric(
            "reliability.intervention", Rubric("judge", ("reliability_intervention_judge.j2",)), _intervention,
            {c: (0, hi) for c, hi in INTERVENTION_CRITERIA.items()}),
    }


def own_rubric(path: Path) -> RatingRubric:
    """The user's jinja2 template: it sees `context`, `reply`, `reference`, `criteria` (the names the file
    rates) and `tag`, and should write each text in a `<reply-{{ tag }}>`... block and ask for a JSON object
    {"<criterion>": n, ...}."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise UserError(f"--rubric {path}: no such file (a task id: {', '.join(task_rubrics())})")
    if path.stat().st_size > MAX_TEMPLATE_BYTES:
        raise UserError(f"--rubric {path}: over {MAX_TEMPLATE_BYTES >> 10} KiB, not a rubric template")

    def messages(item: RatedItem, criteria: list[str]) -> list[dict[str, str]]:
        return [{"role": "user", "content": render_judge(path, reply=item.reply, context=item.context,
                                                         reference=item.reference, criteria=criteria)}]
    return RatingRubric(str(path), Rubric("judge", (str(path),)), messages)


def pick_rubric(name: str) -> RatingRubric:
    known = task_rubrics()
    if name in known:
        return known[name]
    if "/" not in name and not name.endswith(".j2"):
        raise UserError(f"--rubric {name!r}: not a task with a reply rubric ({', '.join(known)}) nor a template file")
    return own_rubric(Path(name))


# --- the file --------------------------------------------------------------------------------------

def _records(path: Path) -> tuple[list[tuple[int, Any]], str]:
    from ..data.loaders import read_user_text
    text = read_user_text(path, "--ratings file", MAX_FILE_BYTES).removeprefix("\ufeff")  # a BOM, as utf-8-sig
    kind = "jsonl" if path.suffix.lower() in (".jsonl", ".ndjson", ".json") else "csv"
    out: list[tuple[int, Any]] = []
    if kind == "jsonl":
        for no, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append((no, json.loads(line)))
                except (ValueError, RecursionError):
                    out.append((no, None))
    else:
        try:  # csv's own field limit (131,072 characters by default) is above MAX_TEXT: a longer field is an error
            reader = csv.DictReader(io.StringIO(text, newline=""))
            missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"--ratings {path}: the CSV header lacks {', '.join(missing)} (needs {', '.join(FIELDS)})")
            out = [(reader.line_num, dict(row)) for row in reader]
        except csv.Error as e:
            raise UserError(f"--ratings {path}: not readable as CSV ({e})") from None
    if len(out) > MAX_LINES:
        raise UserError(f"--ratings {path}: over {MAX_LINES} ratings")
    return out, kind


def _problem(rec: Any, scale_of: Callable[[str], tuple[int, int] | None]) -> str | None:
    if not isinstance(rec, dict):
        return "line is not a JSON object"
    for f in FIELDS:
        if rec.get(f) is None or (isinstance(rec[f], str) and not rec[f].strip()):
            return f"no {f}"
    for f in ("item", "criterion", "rater"):
        if not isinstance(rec[f], (str, int)) or isinstance(rec[f], bool) or len(str(rec[f])) > MAX_NAME:
            return f"{f} is not a short text"
    for f in ("context", "reply", "reference"):
        if f in rec and rec[f] is not None and (not isinstance(rec[f], str) or len(rec[f]) > MAX_TEXT):
            return f"{f} is not text of at most {MAX_TEXT} characters"
    scale = scale_of(str(rec["criterion"]))
    if scale is None:
        return f"criterion {rec['criterion']!r} is not rated by the rubric"
    try:
        v = float(rec["rating"])
    except (TypeError, ValueError, OverflowError):
        return "rating is not a number"
    if isinstance(rec["rating"], bool) or not math.isfinite(v) or v != int(v) or not scale[0] <= v <= scale[1]:
        return f"rating is not a whole number {scale[0]}-{scale[1]}"
    return None


def read_rated_set(path: Path, rubric: RatingRubric, scale: tuple[int, int]) -> RatedSet:
    """Read and check the file; every line that cannot be used is counted under its reason."""
    records, _kind = _records(path)
    crit = rubric.criteria

    def scale_of(c: str) -> tuple[int, int] | None:
        return (crit.get(c) if crit is not None else scale) if c else None

    rs = RatedSet({}, {}, collections.Counter(), len(records))
    for _no, rec in records:
        problem = _problem(rec, scale_of)
        if problem is None:
            item = RatedItem(str(rec["item"]), rec["context"], rec["reply"], rec.get("reference") or "")
            known = rs.items.setdefault(item.id, item)
            by = rs.ratings.setdefault(str(rec["criterion"]), {}).setdefault(item.id, {})
            if known != item:
                problem = "item's context, reply or reference differs from its first line"
            elif str(rec["rater"]) in by:
                problem = "a second rating of the same item, criterion and rater"
            else:
                by[str(rec["rater"])] = float(rec["rating"])
        if problem:
            rs.left_out[problem] += 1
    if not any(rs.ratings.values()):
        why = "; ".join(f"{n} x {r}" for r, n in rs.left_out.most_common(3)) or "no lines"
        raise UserError(f"--ratings {path}: no usable rating ({why})")
    return rs


# --- the run ---------------------------------------------------------------------------------------

@dataclass
class RatingsSpec:
    ratings: str
    ratings_sha256: str
    rubric: str = "reliability.support"
    scale: tuple[int, int] = (1, 5)
    judge: str = "openai/gpt-4.1"
    judge_base_url: str | None = None
    seed: int = 0
    n_boot: int = 1000

    def run_id(self) -> str:
        from .judge import validation_run_id
        return validation_run_id(asdict(self), self.judge)


class _RatedItems(Task):
    """The chosen rubric over the rated items (not a registered task)."""

    id = TASK
    pillar = "judge"
    title = "judge validation on a human-rated set"

    def __init__(self, rubric: RatingRubric, criteria: list[str]):
        self.rating_rubric, self.criteria = rubric, criteria
        self.rubrics = (rubric.rubric,)

    def judge_messages(self, sample: Sample, reply: str, ctx: RunContext) -> list[dict[str, str]]:
        return self.rating_rubric.messages(RatedItem(sample.item.id, **sample.item.input), self.criteria)


def read_verdict(resp: Response | None, criteria: list[str], scale_of) -> tuple[dict[str, float], dict[str, str]]:
    """The judge's rating of each criterion, or the reason there is none (a judge failure, not a rating)."""
    if resp is None:
        return {}, {c: "judge not run" for c in criteria}
    if not resp.ok:
        return {}, {c: f"judge error: {resp.error_kind}" for c in criteria}
    obj = extract_json_object(resp.text or "")
    values, reasons = {}, {}
    for c in criteria:
        lo, hi = scale_of(c)
        got, why = parse_int_scores(obj, [c], lo, hi)
        if c in got and got[c] != int(got[c]):
            why = {c: f"judge value for '{c}' is not a whole number"}
        if why:
            reasons.update(why)
        else:
            values[c] = got[c]
    return values, reasons


def validate_ratings(spec: RatingsSpec, out: Path | None = None, *, runs_root: Path = Path("runs"),
                     limits=None, events=None) -> tuple[Path, RunResults]:
    """Judge every item of the rated set, compare with the humans, write results.json, agreement.json,
    samples.jsonl and report.html."""
    from ..engine import AuthFailure, EndpointDown, Limits, RunSpec, ignore
    from ..files import atomic_open, atomic_write, open_run_dir, run_lock
    from ..engine.spec import versions
    from ..report.judge_check import judge_check_html
    from ..engine import Store
    from .judge import GIVEN, judge_given_replies
    limits, events = limits or Limits(), events or ignore
    if spec.judge == "rules":
        raise UserError("--judge rules cannot rate a human-rated set (it has no rubric of its own): give a model "
                        "spec, or replay/<file> to answer the judge calls from a file")
    rubric = pick_rubric(spec.rubric)
    rated = read_rated_set(Path(spec.ratings), rubric, spec.scale)
    criteria = sorted(c for c, by in rated.ratings.items() if by)
    scale_of = lambda c: rubric.scale(c, spec.scale)  # noqa: E731
    task = _RatedItems(rubric, criteria)
    items = sorted(rated.items.values(), key=lambda i: i.id)
    samples = [Sample(TASK, Item(i.id, {"context": i.context, "reply": i.reply, "reference": i.reference}),
                      [{"role": "user", "content": i.context}]) for i in items]
    run = RunSpec(models=[GIVEN], judge=spec.judge, judge_base_url=spec.judge_base_url, seed=spec.seed,
                  suite="sample", protocol="trustmh", n_boot=spec.n_boot)
    run_dir = open_run_dir(out or runs_root / spec.run_id())
    with run_lock(run_dir):
        store = Store(run_dir / "store.sqlite")
        try:
            store.set_meta("validate_spec", asdict(spec))
            try:
                responses = judge_given_replies(run, task, samples, {i.id: i.reply for i in items}, store,
                                                limits, events)
            except (AuthFailure, EndpointDown) as e:
                raise UserError(str(e)) from None
        finally:
            store.close()
        verdicts = {i.id: read_verdict(responses[i.id], criteria, scale_of) for i in items}
        judge_errors = collections.Counter(r.error_kind for r in responses.values() if r is not None and not r.ok)
        results, found = {}, []
        for c in criteria:
            judged = {i: v[0][c] for i, v in verdicts.items() if c in v[0] and i in rated.ratings[c]}
            failed = collections.Counter(v[1][c] for i, v in verdicts.items() if c in v[1] and i in rated.ratings[c])
            lo, hi = scale_of(c)
            ca = criterion_agreement(c, rated.ratings[c], judged, tuple(range(lo, hi + 1)), seed=spec.seed,
                                     n_boot=spec.n_boot)
            found.append(ca)
            results[f"validate_judge.{c}"] = agreement_task_result(ca, len(rated.ratings[c]), failed,
                                                          judge_errors if failed else collections.Counter())
        with atomic_open(run_dir / "samples.jsonl") as fh:
            for i in items:
                fh.write(json.dumps({"task": TASK, "item_id": i.id, "context": i.context, "reply": i.reply,
                                     "human": {c: rated.ratings[c][i.id] for c in criteria if i.id in rated.ratings[c]},
                                     "judge": spec.judge, "judge_text": (r.text if (r := responses[i.id]) else None),
                                     "judge_ratings": verdicts[i.id][0], "unscored": verdicts[i.id][1]},
                                    ensure_ascii=False) + "\n")
        about = {"judge": spec.judge, "rubric": rubric.name, "ratings": spec.ratings,
                 "ratings_sha256": spec.ratings_sha256, "n_lines": rated.n_lines,
                 "lines_left_out": dict(rated.left_out), "seed": spec.seed, "n_boot": spec.n_boot}
        agreement = agreement_json(found, **about)
        atomic_write(run_dir / "agreement.json", json.dumps(agreement, indent=2, ensure_ascii=False))
        run_results = RunResults(
            run_id=run_dir.name, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            spec={"command": "validate-judge", **asdict(spec), "judge_used": spec.judge,
                  "judge_note": f"rubric {rubric.name}"},
            data={"kind": "ratings", "root": str(Path(spec.ratings).parent),
                  "sha256": {Path(spec.ratings).name: spec.ratings_sha256}},
            versions=versions(),
            bootstrap={"n_boot": spec.n_boot, "level": 0.95, "seed": spec.seed,
                       "method": "percentile, resampling items; judge - ceiling paired"},
            models={spec.judge: ModelResults(model=spec.judge, tasks=results, pillars={})})
        atomic_write(run_dir / "results.json", run_results.model_dump_json(indent=2))
        atomic_write(run_dir / "report.html", judge_check_html(agreement))
    return run_dir, run_results


def parse_scale(text: str) -> tuple[int, int]:
    found = re.fullmatch(r"\s*(-?\d{1,4})\s*-\s*(-?\d{1,4})\s*", text)
    if not found or int(found.group(1)) >= int(found.group(2)):
        raise UserError(f"--scale {text!r}: give LO-HI, two whole numbers, LO below HI (e.g. 1-5)")
    return int(found.group(1)), int(found.group(2))


def ratings_spec(path: Path, **kw: Any) -> RatingsSpec:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise UserError(f"--ratings {path}: no such file")
    return RatingsSpec(ratings=str(path), ratings_sha256=file_sha256(path), **kw)


def agreement_table(agreement: dict[str, Any]):
    """agreement.json as a rich table: one row per criterion and statistic."""
    from rich.table import Table as RichTable
    from ..escaping import styled
    from ..scoring.agreement import BELOW, STAT_NAMES
    table = RichTable(title=f"checking the judge: {agreement['judge']} vs human raters ({agreement.get('rubric')})")
    for col in ("criterion", "statistic", "n", "judge vs humans", "human ceiling", "verdict"):
        table.add_column(col, justify="left" if col in ("criterion", "statistic", "verdict") else "right",
                         overflow="fold")

    def cell(v, ci) -> str:
        return "-" if v is None else f"{v:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    for c in agreement["criteria"]:
        for s, v in c["statistics"].items():
            verdict = styled((v["verdict"], "red")) if v["verdict"] == BELOW else v["verdict"]
            table.add_row(c["criterion"], STAT_NAMES.get(s, s), str(c["n_items"]), cell(v["judge"], v["judge_ci"]),
                          cell(v["ceiling"], v["ceiling_ci"]), verdict)
        bias = c.get("bias") or {}
        table.add_row(c["criterion"], "bias (judge - human)", str(c["n_items"]), cell(bias.get("value"), bias.get("ci")),
                      "-", "")
    return table
