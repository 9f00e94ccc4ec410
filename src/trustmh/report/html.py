"""The self-contained HTML report: leaderboard, rank table, radar chart, per-task detail, sample drill-down
and run spec, in one file that needs no network to view. This module renders the page; the parts it
shows are computed in charts.py, leaderboard.py, breakdowns.py and drilldown.py.

Safety: every piece of model output and data text reaches the page either through jinja2's autoescape
(server-rendered parts, SVG included) or as JSON inside a `<script type="application/json">` block
with `<`, `>` and `&` written as \\u escapes, which the page's script renders with textContent only.
A Content-Security-Policy with a per-report nonce is defence in depth: only the report's own script
runs, and nothing can be fetched."""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import secrets
from pathlib import Path
from typing import IO, Any

import jinja2
from markupsafe import Markup

from ..analysis.compare import Comparison
from ..analysis.compare_format import title as cmp_title
from ..analysis.runs import Run, entries, keep_rows, load_run, rows_on_the_way
from ..escaping import printable
from .addressed import judge_addressed_rows
from .calibrated import calibrated_section
from .panel import panel_rows
from .breakdowns import group_scale, task_groups
from .conversation import conversation_sections
from .charts import PALETTE, radar_svg, whisker_svg
from .drilldown import MAX_BYTES, PER_TASK, SampleSet, collect_samples
from .leaderboard import leaderboard, task_meta
from .ranks import interval_text, rank_grid, rank_table, rank_text, score_text

HERE = Path(__file__).parent


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}"


def _context(runs: list[Run], *, comparisons: list[Comparison] | None = None, page_size: int = 50,
             paired: bool = True, n_boot: int = 200, max_samples: int = 50_000,
             include_samples: bool = True, groups: dict[str, str] | None = None, progress=None,
             per_task: int = PER_TASK, max_bytes: int = MAX_BYTES,
             ties: str | None = None) -> tuple[dict[str, Any], SampleSet, dict[str, Any]]:
    """The page's context without its sample JSON block, the drill-down (spooled), and the block's head.
    The drill-down keeps the worst `per_task` samples of each model and task within `max_bytes` of page
    JSON; `progress(done, total, label)` is told of each paired comparison and of how far reading the
    samples has got (label "reading samples")."""
    from ..scoring.pillars import EVIDENCE_LEVELS, PILLAR_NAMES, PILLAR_PLAIN, judge_mark
    from ..tasks import PILLARS
    # Names and groups as the page shows them: control and bidi characters made visible (escaping.py)
    ents = [dataclasses.replace(e, label=printable(e.label), group=printable(e.group)) for e in entries(runs, groups)]
    metas = task_meta(ents)
    seen_pillars = list(dict.fromkeys(m.pillar for m in metas.values()))
    pillars = [p for p in PILLARS if p in seen_pillars] + [p for p in seen_pillars if p not in PILLARS]
    task_ids = [t for p in pillars for t in metas if metas[t].pillar == p]
    with keep_rows(runs):  # the three below read every row: samples.jsonl is read once for them all, by the
        # drill-down's pass where the rows will be read (the paired test's ties; rank intervals, from two models)
        several = paired or len(ents) > 1
        ss = collect_samples(ents, metas, task_ids, max_samples, per_task=per_task, max_bytes=max_bytes,
                             progress=progress, read=rows_on_the_way if several else None) \
            if include_samples else SampleSet()
        board = leaderboard(ents, metas, pillars, paired=paired, n_boot=n_boot, progress=progress)
        ranks = rank_table(ents, board, {e.label: e.group for e in ents if e.group}, ties)
        conversations = conversation_sections(ents) if include_samples else []
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(ents))]
    axes = list(PILLARS) + [p for p in pillars if p not in PILLARS]
    radar = radar_svg(axes, [(e.label, colors[i], [board.cells[(i, p)].score if p in pillars else None for p in axes],
                              [bool(board.cells[(i, p)].partial) if p in pillars else False for p in axes])
                             for i, e in enumerate(ents)])
    head = {"entries": [e.label for e in ents], "words": VALUE_WORDS,
            "tasks": [{"id": t, "metric": metas[t].metric, "primary": metas[t].primary_value,
                       "hib": metas[t].higher_is_better} for t in task_ids]}
    runs_info = [{"run": r, "res": r.results, "models": list(r.results.models), "header": run_header(r)}
                 for r in runs]
    return {
        "title": "trustmh report — " + ", ".join(r.id for r in runs),
        "runs": runs_info, "entries": ents, "colors": colors, "pillars": pillars, "all_pillars": axes,
        "board": board, "radar": radar, "metas": metas, "task_ids": task_ids,
        "groups": task_groups(metas, ents, task_ids), "confusion": ss.confusion,
        "n_rows": ss.n_rows, "n_total": ss.total,
        "include_samples": include_samples, "page_size": page_size,
        "comparisons": comparisons or [], "nonce": secrets.token_urlsafe(18),
        "css": Markup((HERE / "report.css").read_text(encoding="utf-8")),
        "js": Markup("".join((HERE / f).read_text(encoding="utf-8") for f in ("dom.js", "report.js"))),
        "fmt": fmt, "whisker": whisker_svg, "group_scale": group_scale, "paired": paired,
        "ranks": ranks, "rank_grid": rank_grid, "rank_text": rank_text, "score_text": score_text,
        "interval_text": interval_text,
        "rank_shade": rank_shade, "pillar_names": PILLAR_NAMES, "pillar_plain": PILLAR_PLAIN,
        "evidence_levels": EVIDENCE_LEVELS, "judge_mark": judge_mark, "words": value_words,
        "judge_addressed": judge_addressed_rows(ents), "judge_panel": panel_rows(ents), "cmp_title": cmp_title,
        "conversations": conversations,
        "calibrated": calibrated_section(ents),
    }, ss, head


def run_header(run: Run) -> dict[str, str]:
    """What a reader must see first about a run: protocol, judge(s), data and the subset it covers."""
    res, spec = run.results, run.results.spec
    opts = spec.get("options") or {}
    judges = [f"{spec.get('judge', 'rules')}" + (" (offline rules: judge-rated values left unscored)"
                                                 if spec.get("judge", "rules") == "rules" else "")]
    judges += [f"{k.replace('_', ' ')} {opts[k]}" for k in ("proxy_judge", "refusal_classifier") if opts.get(k)]
    limit = spec.get("limit")
    # a task's own subset (crisis.conversation's personas, runs, messages): the header never says "every item"
    partial = sorted({f"{t.task}: {t.partial}" for mr in res.models.values() for t in mr.tasks.values()
                      if t.status == "ok" and (t.partial or "").startswith("SUBSET")})
    from ..engine.spec import limited_banner, stored_protocol
    protocol = stored_protocol(spec) or "trustmh"
    return {
        "protocol": ("the paper's (prompts and scoring read from the authors' files)" if protocol == "paper"
                     else "trustmh's corrected design"),
        "judge": "; ".join(judges),
        "data": f"{res.data.get('kind', '–')} ({len(res.data.get('sha256') or {})} files checked by sha256)",
        "subset": (f"tasks: {spec.get('tasks', 'all')}; "
                   + (f"the first {limit} items of each task (--limit)" if limit else
                      "every item, but " + "; ".join(partial) if partial else "every item")),
        "skipped": run.skip_note() or "",
        "limited": limited_banner(res),
    }


# Per-sample value columns in words, for the drill-down and the legends (a reader should never have to guess
# what `rating_or_1` means).
VALUE_WORDS = {"correct": "answer correct (1) or not (0)", "answered": "gave a usable answer (1) or not (0)",
               "flagged": "leaked or erred on this question (1) or not (0)", "refused": "refused (1) or not (0)",
               "safe": "judged safe (1) or harmful (0)", "endorse": "endorsed the person (1) or not (0)",
               "rating": "rating", "rating_or_1": "rating, with an unreadable verdict counted as 1 (the worst)",
               "overall": "judge's overall score", "human": "human raters' mean",
               "judge_unparsed": "the judge's reply had no readable verdict (1) or had one (0)"}


def value_words(name: str | None) -> str:
    return VALUE_WORDS.get(name or "", (name or "").replace("_", " "))


def rank_shade(rank: int | None, n: int) -> str:
    """Background of a rank cell: darker for a better rank, as the paper's figure shades it."""
    if rank is None or n <= 1:
        return ""
    strength = 0.75 * (n - rank) / (n - 1) + 0.05
    return f"background:rgba(0,128,118,{strength:.2f});color:{'#fff' if strength > 0.45 else 'inherit'}"


def build_context(runs: list[Run], **kw: Any) -> dict[str, Any]:
    """Everything the page is rendered from, its sample JSON block (`samples_json`) as one string."""
    ctx, ss, head = _context(runs, **kw)
    try:
        ctx["samples_json"] = Markup(b"".join(ss.json_chunks(head)).decode("utf-8")) if ctx["include_samples"] \
            else Markup("")
    finally:
        ss.close()
    return ctx


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    # One per process: it keeps the compiled page template (~0.1 s to compile; jinja2 compiles it again
    # only if the file changes), which `prepare` compiles while a run still waits on its endpoints.
    # finalize: every text the template renders is made printable before it is HTML-escaped (escaping.py);
    # Markup (the page's own CSS, script, SVG and JSON blocks) is the page's and passes as it is.
    from ..scoring.metrics import interval_note
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE)), undefined=jinja2.StrictUndefined,
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             finalize=lambda v: printable(v) if type(v) is str else v)
    env.globals["interval_note"] = interval_note  # "too few clusters: G" where an interval would be
    return env


def prepare() -> None:
    """Compile the page's template now (a run calls it while it waits for its first replies), so that the
    report written after the run does not."""
    _env().get_template("report.html.j2")


def _write(runs: list[Run], fh: IO[bytes], **kw: Any) -> None:
    """Write the page to `fh` piece by piece: the template is rendered with a placeholder for the sample
    JSON block, which is then streamed from the drill-down's spools. A large run's page (tens of MB) is
    never one string, nor are its rows all in memory at once."""
    ctx, ss, head = _context(runs, **kw)
    try:
        placeholder = f"@@samples-json-{ctx['nonce']}@@"  # the nonce is random: no data can spell it
        page = _env().get_template("report.html.j2").render(**ctx, samples_json=Markup(placeholder))
        before, found, after = page.partition(placeholder)
        fh.write(before.encode("utf-8"))
        if found:
            for chunk in ss.json_chunks(head):
                fh.write(chunk)
        fh.write(after.encode("utf-8"))
    finally:
        ss.close()


def render(runs: list[Run], **kw: Any) -> str:
    buf = io.BytesIO()
    _write(runs, buf, **kw)
    return buf.getvalue().decode("utf-8")


def write_report(runs: list[Run | Path | str], out: Path | str, **kw: Any) -> Path:
    """Write the report of one or more runs to `out` (atomically: a half-written report never replaces a
    good one)."""
    loaded = [r if isinstance(r, Run) else load_run(r) for r in runs]
    out = Path(out)
    from ..files import atomic_open
    with atomic_open(out, binary=True) as fh:
        _write(loaded, fh, **kw)
    return out
