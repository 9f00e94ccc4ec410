"""`trustmh annotate RUN...`: clinicians rate a sample of a run's judged replies in a local page, blind.

The run's judged samples (every scored sample of a task whose judge has a rating form,
`validation.rating_forms`) are the frame; a seeded draw (`design.draw`: uniform, or stratified by
model, task and the judge's verdict) picks the items, and each item's inclusion probability is recorded
with it. The draw and every rating live in the run folder, in annotation.json, written whole through the
one writer (`files.atomic_write`) after each rating, never in the store: rating resumes where it
stopped, by any number of raters, each known by the id they type in.

Blinding: the page is given the context (as the person wrote it, `as_written`), the reply and the form (the
judge's rubric with its template's anchors), an opaque number per item, and each set of items' progress
toward a calibrated value (a set named by its form, `plan_notes` saying which cannot reach one); never the
model, the task id, the run, the item id or the judge's verdict.
Each rater sees the items in an order of their own, shuffled from the draw's seed and the rater's id.

The server is `trustmh view`'s (report/local_server.py: 127.0.0.1 only, Host checked). Everything it
serves needs the session's token, which is in the URL it prints (the page sends it back in a header);
a write also needs the page's own Origin. `export` writes the ratings in `validate-judge`'s format."""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..analysis.runs import Run, load_run, run_context
from ..errors import UserError
from ..report.local_server import LocalHandler, bind
from .design import DESIGNS, FrameRow, draw, frame_items
from .rating_forms import RatingForm, form_for

ANNOTATION = "annotation.json"
KIND = "trustmh annotation"
MAX_ANNOTATION_BYTES = 64 << 20
MAX_TEXT = 200_000  # characters of one text sent to the page
RATER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
HERE = Path(__file__).resolve().parents[1] / "report"


# --- the frame and the draw ------------------------------------------------------------------------

def judged_tasks(run: Run) -> tuple[dict[str, RatingForm], dict[str, str]]:
    """The run's tasks that have a rating form, and why each other judged task has none."""
    from ..plugins import load_task_plugins
    from ..tasks import TASKS
    load_task_plugins()
    ctx = run_context(run)
    forms, without = {}, {}
    for task_id in sorted({t for m in run.results.models.values() for t in m.tasks}):
        cls = TASKS.get(task_id)
        if cls is None:
            continue
        form, why = form_for(cls(), ctx)
        if form is not None:
            forms[task_id] = form
        elif why != "not judged by an LLM judge":
            without[task_id] = why or "no rating form"
    return forms, without


def primary_of(run: Run, model: str, task: str) -> str:
    return run.results.models[model].tasks[task].primary_value


def frame_of(run: Run, forms: dict[str, RatingForm]) -> list[FrameRow]:
    """Every scored sample of a task with a form: the items the judged metric rests on."""
    rows = []
    for rec in run.iter_samples():
        task, model = rec.get("task"), rec.get("model")
        if task not in forms or model not in run.results.models or rec.get("error"):
            continue
        value = (rec.get("values") or {}).get(primary_of(run, model, task))
        if isinstance(value, (int, float)) and value == value:
            rows.append(FrameRow(model, task, str(rec.get("item_id")), str(rec.get("variant") or ""), f"{value:g}"))
    return rows


def unit_id(run: Run, row: FrameRow, seed: int) -> str:
    """An opaque id for a drawn item: nothing of its model, task or item can be read from it."""
    text = "\x1f".join([run.id, row.model, row.task, row.item_id, row.variant, str(seed)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- annotation.json ---------------------------------------------------------------------------------

@dataclass
class Annotation:
    """A run's draw and its ratings (annotation.json)."""

    path: Path
    run_id: str
    design: dict[str, Any]
    units: list[dict[str, Any]]
    ratings: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    left_out: collections.Counter = field(default_factory=collections.Counter)  # lines of an export not read

    def to_json(self) -> dict[str, Any]:
        return {"kind": KIND, "version": 1, "run_id": self.run_id, "design": self.design, "units": self.units,
                "ratings": self.ratings}

    def save(self) -> None:
        from ..files import atomic_write
        atomic_write(self.path, json.dumps(self.to_json(), indent=1, ensure_ascii=False))

    def rated_by(self, rater: str) -> set[str]:
        return {r["unit"] for r in self.ratings if r["rater"] == rater}

    def rate(self, unit: str, rater: str, answers: dict[str, int]) -> None:
        """A rater's rating of a unit; a second one from the same rater replaces the first."""
        self.ratings = [r for r in self.ratings if not (r["unit"] == unit and r["rater"] == rater)]
        self.ratings.append({"unit": unit, "rater": rater, "answers": answers,
                             "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})


def design_pi(ann: Annotation, unit: dict[str, Any]) -> float | None:
    """A drawn unit's inclusion probability as the draw's own record gives it: the share of the frame's items
    drawn (uniform), or of its stratum's replies (stratified). None when the record cannot say."""
    d = ann.design
    if d["kind"] == "uniform" and isinstance(d.get("tasks"), dict):  # drawn task by task (plan_tasks)
        h = d["tasks"].get(unit.get("task"))
    elif d["kind"] == "uniform":  # a draw over every task's items at once (annotation files before issue 47)
        items = {(u["task"], u["item_id"], u["variant"]) for u in ann.units}
        total = d.get("n_items")
        return len(items) / total if isinstance(total, int) and total >= len(items) else None
    else:
        h = (d.get("strata") or {}).get(unit.get("stratum"))
    if not isinstance(h, dict) or not isinstance(h.get("size"), int) or not isinstance(h.get("drawn"), int) \
            or not 0 < h["drawn"] <= h["size"]:
        return None
    return h["drawn"] / h["size"]


def checked_ratings(ann: Annotation, forms: dict[str, RatingForm]) -> tuple[list[dict[str, Any]], collections.Counter]:
    """The ratings of annotation.json that are ratings on their item's form, each (item, rater) once, and the
    rest counted by reason: answers that are not the form's (a string "5", a fraction, NaN, off the scale,
    missing or unknown criteria), a second rating of an item by the same rater (the later one is kept, as
    the page keeps it), an item whose inclusion probability is not the one its draw gives (a weight that is
    not the design's would move the estimate: 1e-300 moved a mean from 2.90 to 4.0), an item of a task
    without a form."""
    units = {u["id"]: u for u in ann.units}
    left: collections.Counter = collections.Counter(ann.left_out)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in ann.ratings:
        key = (r["unit"], r["rater"])
        if key in latest:
            left["a second rating of the same item by the same rater (the later one kept)"] += 1
        latest[key] = r
    kept = []
    for r in latest.values():
        u = units[r["unit"]]
        form = forms.get(u["task"])
        want = design_pi(ann, u)
        why = ("the item's task has no rating form in this run" if form is None else form.problem(r["answers"]))
        if why is None and (want is None or not math.isclose(u["pi"], want, rel_tol=1e-9)):
            why = "the item's inclusion probability is not the one its draw gives"
        if why:
            left[why] += 1
        else:
            kept.append(r)
    return kept, left


def read_annotation(run_dir: Path) -> Annotation | None:
    """annotation.json of a run folder, checked (None when there is none): a file that is not one is a
    one-line error, as any damaged run file is."""
    path = Path(run_dir) / ANNOTATION
    return read_annotation_file(path) if path.exists() or path.is_symlink() else None


def read_annotation_file(path: Path) -> Annotation:
    """An annotation file, checked (`trustmh score --ratings FILE` names another copy of one)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if not path.is_file() or path.is_symlink():
        raise UserError(f"{path}: not a regular file")
    if path.stat().st_size > MAX_ANNOTATION_BYTES:
        raise UserError(f"{path}: over {MAX_ANNOTATION_BYTES >> 20} MiB, not an annotation file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise UserError(f"{path}: not readable JSON ({str(e)[:120]})") from None
    problem = _shape(data)
    if problem:
        raise UserError(f"{path}: {problem}")
    return Annotation(path, data["run_id"], data["design"], data["units"], data["ratings"])


EXPORT_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def read_ratings(path: Path, run_dir: Path) -> Annotation:
    """`trustmh score --ratings FILE`: an annotation file, or `annotate --export`'s CSV or JSON Lines read back
    onto the run's own draw (RUN/annotation.json holds the draw; the export, one line per criterion of a
    rating, holds the ratings). A line that is not a rating of a drawn item is counted with its reason."""
    path = Path(path)
    if path.suffix.lower() not in EXPORT_SUFFIXES:
        return read_annotation_file(path)
    from .human_ratings import _records
    base = read_annotation(run_dir)
    if base is None:
        raise UserError(f"--ratings {path}: an export holds the ratings, not the draw they rate; {run_dir} has no "
                        f"{ANNOTATION} (give the annotation file itself, or the run the export came from)")
    records, kind = _records(path)
    units = {u["id"] for u in base.units}
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    left: collections.Counter = collections.Counter()
    for _no, rec in records:
        if not isinstance(rec, dict) or rec.get("item") not in units:
            left["a line's item is not an item of this run's draw"] += 1
            continue
        rater, criterion, rating = rec.get("rater"), rec.get("criterion"), rec.get("rating")
        if not isinstance(rater, str) or not RATER.match(rater) or not isinstance(criterion, str):
            left["a line's rater or criterion is missing or malformed"] += 1
            continue
        if kind == "csv" and isinstance(rating, str):  # CSV cells are text: "4" is the number 4, "4.5" a fraction
            text = rating.strip()
            rating = int(text) if re.fullmatch(r"-?\d{1,6}", text) else (
                float(text) if re.fullmatch(r"-?\d{1,6}\.\d{1,6}", text) else rating)
        got = answers.setdefault((rec["item"], rater), {})
        if criterion in got:
            left["a second rating of the same item, criterion and rater"] += 1
            continue
        got[criterion] = rating
    ratings = [{"unit": u, "rater": r, "answers": a} for (u, r), a in answers.items()]
    return Annotation(path, base.run_id, base.design, base.units, ratings, left_out=left)


def _shape(data: Any) -> str | None:
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return "not a trustmh annotation file"
    d = data.get("design")
    if not isinstance(d, dict) or d.get("kind") not in DESIGNS or not isinstance(d.get("seed"), int):
        return "design: missing or unknown"
    if not isinstance(data.get("units"), list) or not isinstance(data.get("ratings"), list):
        return "units and ratings must be lists"
    for u in data["units"]:
        if not isinstance(u, dict) or not all(isinstance(u.get(k), str) for k in ("id", "model", "task", "item_id", "variant")):
            return "a unit lacks its id, model, task, item_id or variant"
        pi = u.get("pi")
        if not isinstance(pi, (int, float)) or isinstance(pi, bool) or not 0 < pi <= 1:
            return f"unit {u['id']}: inclusion probability pi must be in (0, 1]"
    ids = {u["id"] for u in data["units"]}
    for r in data["ratings"]:
        if not isinstance(r, dict) or r.get("unit") not in ids or not isinstance(r.get("rater"), str) \
                or not isinstance(r.get("answers"), dict):
            return "a rating lacks a drawn unit, a rater or its answers"
    return None


def open_annotation(run: Run, n: int | None, design: str | None, seed: int | None) -> Annotation:
    """The run's draw: the one in annotation.json (rating resumes), else a new one of `n` items."""
    found = read_annotation(run.dir)
    if found is not None:
        if found.run_id != run.id:
            raise UserError(f"{found.path} belongs to run {found.run_id}, not {run.id}")
        asked = {"n": n, "kind": design, "seed": seed}
        differ = [k for k, v in asked.items() if v is not None and found.design.get(k) != v]
        if differ:
            raise UserError(f"{run.dir} already has a draw ({found.design['kind']}, n={found.design['n']}, seed="
                            f"{found.design['seed']}); rate that one (leave out --n/--design/--seed), or move "
                            f"{ANNOTATION} away to draw again")
        return found
    forms, without = judged_tasks(run)
    if not forms:
        why = "; ".join(f"{t}: {w}" for t, w in sorted(without.items())) or "no task is judged by an LLM judge"
        raise UserError(f"{run.dir}: nothing to rate ({why})")
    frame = frame_of(run, forms)
    if not frame:
        raise UserError(f"{run.dir}: no judged sample was scored; nothing to rate")
    design, seed = design or "uniform", 0 if seed is None else seed
    n = n or min(100, frame_items(frame) if design == "uniform" else len(frame))
    if n < 2:
        raise UserError("--n: draw at least 2 items")
    drawn = draw(frame, n, design, seed)
    sizes: dict[str, int] = {}
    from .design import stratum_of
    for row in frame:
        h = stratum_of(row, design)
        sizes[h] = sizes.get(h, 0) + 1
    units = [{"id": unit_id(run, d.row, seed), "model": d.row.model, "task": d.row.task, "item_id": d.row.item_id,
              "variant": d.row.variant, "stratum": d.stratum, "pi": d.pi} for d in drawn]
    counts: dict[str, int] = {}
    for d in drawn:
        counts[d.stratum] = counts.get(d.stratum, 0) + 1
    task_items: dict[str, set] = {}
    for row in frame:
        task_items.setdefault(row.task, set()).add((row.item_id, row.variant))
    task_drawn: dict[str, set] = {}
    for d in drawn:
        task_drawn.setdefault(d.row.task, set()).add((d.row.item_id, d.row.variant))
    spec = {"kind": design, "seed": seed, "n": n, "n_frame": len(frame), "n_items": frame_items(frame),
            "strata": {h: {"size": sizes[h], "drawn": counts.get(h, 0)} for h in sorted(sizes)},
            **({"tasks": {t: {"size": len(v), "drawn": len(task_drawn.get(t, ()))} for t, v in sorted(task_items.items())}}
               if design == "uniform" else {}),
            "samples_sha256": run.results.outputs.get("samples_sha256"),
            "not_rated": without}
    ann = Annotation(run.dir / ANNOTATION, run.id, spec, units)
    ann.save()
    return ann


def plan_notes(ann: Annotation) -> list[tuple[str, str]]:
    """(task, why) for each (model's) task of the draw that cannot reach a calibrated value as drawn, said when
    the draw is made and on the rating page: fewer than MIN_RATED items drawn of a model's task (a task too
    small for any draw, or an --n too small for every task), or every item of it drawn (then the value is the
    raters' own, with nothing left for the judge to add)."""
    from .calibration import MIN_RATED
    per: dict[tuple[str, str], int] = {}
    for u in ann.units:
        per[(u["model"], u["task"])] = per.get((u["model"], u["task"]), 0) + 1
    tasks = {t: v.get("size") for t, v in (ann.design.get("tasks") or {}).items() if isinstance(v, dict)}
    strata = {h: v.get("size") for h, v in (ann.design.get("strata") or {}).items() if isinstance(v, dict)}

    def size(model: str, task: str) -> int | None:  # the model's replies to the task the draw was made from
        if task in tasks:
            return tasks[task]
        got = [k for h, k in strata.items() if h.startswith(f"{model}\x1f{task}\x1f") and isinstance(k, int)]
        return sum(got) if got else None
    out: dict[str, str] = {}
    for (model, task), k in sorted(per.items()):
        total = size(model, task)
        if total is not None and total <= MIN_RATED:
            out.setdefault(task, f"the task has {total} item{'s' if total != 1 else ''}: a calibrated value needs "
                                 f"{MIN_RATED} rated and one more the judge alone rates, so its value will be the "
                                 "raters' own at best")
        elif k < MIN_RATED:
            out.setdefault(task, f"{k} item{'s' if k != 1 else ''} drawn, fewer than the {MIN_RATED} a calibrated "
                                 "value needs: draw again with a larger --n")
        elif total == k:
            out.setdefault(task, f"all {k} items drawn: the value will be the raters' own, not calibrated (nothing "
                                 "is left for the judge to add)")
    return sorted(out.items())


# --- what the page is given ---------------------------------------------------------------------------

_ROLE = {"user": "Message", "assistant": "An earlier reply"}
_EXPORT_ROLE = {v: k for k, v in _ROLE.items()}


def _text(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + f"… [{len(s) - MAX_TEXT} more characters]"


def as_written(messages: list[Any]) -> list[dict[str, str]]:
    """The conversation a reply answers, as the people in it wrote it: the model's instructions (a system
    message, the prompt's own preamble such as "You are the supporter in a text chat...") are left out, and a
    prompt that asks for the next turn of a transcript ("Seeker: ...", "Supporter: ...", one turn a line, ending
    in the cue "Supporter:", as the dialogue tasks write it) becomes its turns, each under its speaker, without
    the cue. Any other message is shown whole: a person's own text that happens to quote "User: ..." keeps
    every word."""
    from .human_ratings import _HELPER, _SEEKER, _TURN
    speakers = _SEEKER | _HELPER

    def speaker(line: str) -> re.Match | None:
        m = _TURN.match(line)
        return m if m and m.group(1).strip().lower() in speakers else None
    out: list[dict[str, str]] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") == "system":
            continue
        text = _text(m.get("content", ""))
        if m.get("role") == "assistant":
            out.append({"who": _ROLE["assistant"], "text": text})
            continue
        lines = text.splitlines()
        first = next((i for i, line in enumerate(lines) if speaker(line)), None)
        last = next((line for line in reversed(lines) if line.strip()), "")
        cue = speaker(last)
        if first is None or cue is None or cue.group(2).strip():  # not a "write the next turn" prompt: as it is
            out.append({"who": _ROLE["user"], "text": text})
            continue
        turns: list[dict[str, str]] = []
        for line in lines[first:]:
            got = speaker(line)
            if got:
                turns.append({"who": got.group(1).strip(), "text": got.group(2).strip()})
            else:
                turns[-1]["text"] = (turns[-1]["text"] + "\n" + line).strip()
        out += [t for t in turns if t["text"]]
    return out


@dataclass
class Shown:
    """A drawn item as the rater sees it, and what its rating is checked against."""

    unit: str
    form: RatingForm
    context: list[dict[str, str]]
    reply: str


def shown_units(runs: list[Run], anns: list[Annotation]) -> dict[str, Shown]:
    """Each drawn item's context and reply, read from its run's samples.jsonl (only the drawn ones kept)."""
    out: dict[str, Shown] = {}
    for run, ann in zip(runs, anns):
        forms, _ = judged_tasks(run)
        by_key = {(u["model"], u["task"], u["item_id"], u["variant"]): u for u in ann.units}
        for rec in run.iter_samples():
            key = (rec.get("model"), rec.get("task"), str(rec.get("item_id")), str(rec.get("variant") or ""))
            u = by_key.get(key)  # type: ignore[arg-type]
            if u is None or u["task"] not in forms:
                continue
            context = as_written(rec.get("messages") if isinstance(rec.get("messages"), list) else [])
            out[u["id"]] = Shown(u["id"], forms[u["task"]], context, _text(rec.get("response") or ""))
    return out


def order_for(units: list[str], rater: str, seed: int) -> list[str]:
    """The rater's own shuffled order of the drawn items."""
    import numpy as np
    digest = int(hashlib.sha256(f"{seed}\x1f{rater}".encode()).hexdigest()[:12], 16)
    perm = np.random.default_rng(digest).permutation(len(units))
    return [units[i] for i in perm]


# --- the server ----------------------------------------------------------------------------------------

class _Handler(LocalHandler):
    server_version = "trustmh-annotate"
    anns: list[Annotation]
    shown: dict[str, Shown]
    owner: dict[str, Annotation]
    page: bytes

    def do_GET(self) -> None:  # noqa: N802
        if not self.host_ok():
            return self._refuse(403, "this server answers its own address only")
        url = urlsplit(self.path)
        try:
            args = {k: v[-1] for k, v in parse_qs(url.query, max_num_fields=10).items()}
        except ValueError:
            return self._refuse(400, "bad query")
        if url.path == "/":
            if not self.token_ok(args.get("t")):
                return self._refuse(403, "open the address `trustmh annotate` printed (it holds the session's token)")
            return self._send(200, self.page, "text/html; charset=utf-8")
        if not self.token_ok(self.headers.get("X-Trustmh-Token")):
            return self._refuse(403, "this request lacks the session's token")
        if url.path == "/api/next":
            rater = args.get("rater", "")
            if not RATER.match(rater):
                return self._refuse(400, "rater: a short id (letters, digits, . _ @ -)")
            return self._json(self._next(rater, args.get("skip", "")))
        if url.path == "/api/plan":
            return self._json({"sets": self._sets()})
        return self._refuse(404, "no such page")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        why = self.write_refused()
        if why:
            return self._refuse(403, why)
        if urlsplit(self.path).path != "/api/rate":
            return self._refuse(404, "no such page")
        try:
            body = self.read_json()
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            return self._refuse(400, f"not a rating: {str(e)[:120]}")
        if not isinstance(body, dict):
            return self._refuse(400, "not a rating")
        rater, unit, answers = body.get("rater"), body.get("unit"), body.get("answers")
        if not isinstance(rater, str) or not RATER.match(rater):
            return self._refuse(400, "rater: a short id (letters, digits, . _ @ -)")
        shown = self.shown.get(unit) if isinstance(unit, str) else None
        if shown is None:
            return self._refuse(400, "no such item")
        problem = shown.form.check(answers)
        if problem:
            return self._refuse(400, problem)
        ann = self.owner[unit]
        with ann.lock:
            ann.rate(unit, rater, answers)
            ann.save()
        return self._json({"ok": True, **self._progress(rater)})

    def _progress(self, rater: str) -> dict[str, Any]:
        done = sum(len(a.rated_by(rater) & set(self.shown)) for a in self.anns)
        return {"done": done, "total": len(self.shown), "sets": self._sets()}

    def _sets(self) -> list[dict[str, Any]]:
        """Progress toward a calibrated value, one set of items per task (named by its form, never its id):
        items rated by anyone, for the model with the fewest, against MIN_RATED; and the draw's note where the
        set cannot reach one (`plan_notes`)."""
        from .calibration import MIN_RATED
        tasks = sorted({u["task"] for a in self.anns for u in a.units if u["id"] in self.shown})
        notes = {t: why for a in self.anns for t, why in plan_notes(a)}
        out = []
        for k, task in enumerate(tasks, 1):
            drawn: dict[str, int] = {}
            rated: dict[str, int] = {}
            title = ""
            for a in self.anns:
                done = {r["unit"] for r in a.ratings}
                for u in a.units:
                    if u["task"] == task and u["id"] in self.shown:
                        key = f"{a.run_id}\x1f{u['model']}"
                        drawn[key] = drawn.get(key, 0) + 1
                        rated[key] = rated.get(key, 0) + (u["id"] in done)
                        title = self.shown[u["id"]].form.title
            least = min(drawn, key=lambda m: (rated[m], m))
            out.append({"label": f"Set {k}: {title}", "rated": rated[least], "drawn": drawn[least],
                        "needed": MIN_RATED, "note": notes.get(task)})
        return out

    def _next(self, rater: str, skip: str) -> dict[str, Any]:
        done = set().union(*(a.rated_by(rater) for a in self.anns))
        order = order_for(sorted(self.shown), rater, sum(a.design["seed"] for a in self.anns))
        todo = [u for u in order if u not in done]
        if skip in todo and len(todo) > 1:  # "later": this one goes to the end of the rater's queue
            todo.remove(skip)
            todo.append(skip)
        unit = None
        if todo:
            s = self.shown[todo[0]]
            unit = {"id": s.unit, "number": order.index(s.unit) + 1, "form": s.form.public(), "context": s.context,
                    "reply": s.reply}
        return {"unit": unit, **self._progress(rater)}


def _page(nonce: str) -> bytes:
    css = (HERE / "report.css").read_text(encoding="utf-8")
    js = "".join((HERE / f).read_text(encoding="utf-8") for f in ("dom.js", "annotate.js"))
    html = (HERE / "annotate.html").read_text(encoding="utf-8")
    head, _, tail = html.replace("NONCE", nonce).partition("/*JS*/")
    return (head.replace("/*CSS*/", css) + js + tail).encode("utf-8")


def make_server(runs: list[Run], anns: list[Annotation], port: int = 0):
    """The rating page's server on 127.0.0.1:`port` (0: any free port), not yet serving; its URL with the
    session's token is `url(server)`."""
    shown = shown_units(runs, anns)
    owner = {u["id"]: a for a in anns for u in a.units if u["id"] in shown}
    handler = type("Handler", (_Handler,), {"anns": anns, "shown": shown, "owner": owner})
    server = bind(handler, port)
    handler.page = _page(handler.nonce)
    return server


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/?t={server.RequestHandlerClass.token}"


# --- export in validate-judge's format --------------------------------------------------------------

EXPORT_FIELDS = ("item", "context", "reply", "criterion", "rater", "rating")


def export_rows(runs: list[Run], anns: list[Annotation]) -> list[dict[str, Any]]:
    """One line per rating and criterion, as `trustmh validate-judge --ratings` reads them: the item is the
    drawn unit's opaque id, the context its messages as `role: text` lines."""
    shown = shown_units(runs, anns)
    rows = []
    for run, ann in zip(runs, anns):
        usable, _ = checked_ratings(ann, judged_tasks(run)[0])
        for r in sorted(usable, key=lambda r: (r["unit"], r["rater"])):
            s = shown.get(r["unit"])
            if s is None:
                continue
            # each turn under its speaker, as validate-judge's context reads it ("Seeker: ...", "user: ...")
            context = "\n".join(f"{_EXPORT_ROLE.get(c['who'], c['who'])}: {c['text']}" for c in s.context)
            for c in s.form.criteria:
                if c.name in r["answers"]:
                    rows.append({"item": s.unit, "context": context, "reply": s.reply, "criterion": c.name,
                                 "rater": r["rater"], "rating": r["answers"][c.name]})
    return rows


def export(runs: list[Run], anns: list[Annotation], path: Path) -> int:
    """Write the ratings to `path` (.csv, or .jsonl/.json for JSON Lines) through the one writer. CSV goes
    through the escaping layer (`escaping.csv_text`): a reply that starts with `=HYPERLINK(` or holds
    control characters is a text cell a spreadsheet shows, never a formula it runs; the JSON Lines export
    keeps every text exactly."""
    from ..files import atomic_write, check_output_target
    from ..escaping import csv_text
    path = check_output_target(Path(path), [r.dir for r in runs], what="--export")
    rows = export_rows(runs, anns)
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        text = csv_text(list(EXPORT_FIELDS), rows)
    atomic_write(path, text)
    return len(rows)


def load_runs(paths: list[Path]) -> list[Run]:
    runs = [load_run(p) for p in paths]
    if len({r.dir.resolve() for r in runs}) != len(runs):
        raise UserError("a run is given twice")
    return runs
