"""The report's "Anchored to clinicians" section: each judged value beside its calibrated value (PPI++ from
clinicians' ratings of the run, `trustmh annotate`), with what each one claims in plain words. Every text
passes jinja2's autoescape."""

from __future__ import annotations

from typing import Any

import jinja2
from markupsafe import Markup

_SECTION = """
<section id="calibrated">
<h2>Anchored to clinicians</h2>
<p class="note"><b>Judge-only</b> is the LLM judge's verdicts aggregated over every item: its interval shows how
the items vary, not how wrong the judge is. <b>Calibrated</b> corrects it with clinicians' ratings of a random
sample of the same items (prediction-powered inference, PPI++): it estimates the value clinicians would give on
these items, stays unbiased however biased the judge is, and its interval includes the judge's error. It does
not make the judge better, and it speaks for these items only. &lambda; is how much the judge is trusted (0: the
clinicians' ratings alone, 1: the judge fully corrected by them); <i>effective n</i> is how many clinician ratings
alone would give as narrow an interval. Under a draw stratified by the judge's verdict the value is the
post-stratified mean of the clinicians' ratings (no &lambda;, no effective n); rated values that do not vary get
an exact bound, never a zero-width interval; several raters are resampled with the items.</p>
{% for r in rows %}{% if loop.first %}<div class="scroll"><table class="calibrated">
<tr><th>model</th><th>task</th><th>metric</th><th>judge-only</th><th>calibrated</th><th>rated / judge-only items</th>
<th>&lambda;</th><th>effective n</th><th>reading</th></tr>{% endif %}
<tr><td>{{ r.model }}</td><td><code>{{ r.task }}</code></td><td>{{ r.metric }}</td>
<td>{{ cell(r.judge, r.judge_ci) }}</td>
<td>{% if r.cal.value is not none %}<b>{{ cell(r.cal.value, r.cal.ci) }}</b>{% if r.cal.interval %}<div class="note">{{ r.cal.interval }}</div>{% endif %}{% else %}<span class="warn">no value: {{ r.cal.reason }}</span>{% endif %}</td>
<td>{{ r.cal.n_human }} / {{ r.cal.n_judge_only }}</td><td>{{ num(r.cal.lam, 2) }}</td><td>{{ num(r.cal.effective_n, 0) }}</td>
<td class="note">{{ r.reading }}</td></tr>
{% if loop.last %}</table></div>{% endif %}{% endfor %}
{% for c in about %}<p class="note">Ratings: {{ c.n_rated }} items rated by {{ c.raters|join(", ") }} ({{ c.design.kind }} draw of
{{ c.design.n }} from {{ c.design.n_frame }} judged samples, seed {{ c.design.seed }}){% if c.invalid %}; <span class="warn">{{ c.invalid }}</span>{% endif %}{% if c.get("ratings_left_out") %}; <span class="warn">ratings left out: {% for why, k in c.ratings_left_out.items() %}{{ why }} ({{ k }}){% if not loop.last %}, {% endif %}{% endfor %}</span>{% endif %}.</p>{% endfor %}
</section>
"""


def _cell(value: float | None, ci: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _num(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def reading(judge: float | None, cal) -> str:
    """One plain sentence on what the two values say together."""
    if cal.value is None:
        return "only the judge's value is known here"
    if cal.ci is None or judge is None:
        return "calibrated value without an interval"
    if not cal.ci[0] <= judge <= cal.ci[1]:
        side = "higher" if judge > cal.ci[1] else "lower"
        return f"the judge rates this {side} than clinicians do: read the calibrated value"
    return "the judge's value agrees with the clinicians' within the calibrated interval"


def calibrated_rows(entries: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, about, seen = [], [], set()
    for e in entries:
        res = e.run.results
        if res.calibration is None:
            continue
        if id(e.run) not in seen:
            seen.add(id(e.run))
            about.append(res.calibration)
        for task_id, tr in sorted(e.result.tasks.items()):
            if tr.calibrated is not None:
                rows.append({"model": e.label, "task": task_id, "metric": tr.metric, "judge": tr.value,
                             "judge_ci": tr.ci, "cal": tr.calibrated, "reading": reading(tr.value, tr.calibrated)})
            for name, mv in sorted(tr.metrics.items()):
                if mv.calibrated is not None and name != tr.metric:
                    rows.append({"model": e.label, "task": task_id, "metric": name, "judge": mv.value,
                                 "judge_ci": mv.ci, "cal": mv.calibrated, "reading": reading(mv.value, mv.calibrated)})
    return rows, about


def calibrated_section(entries: list[Any]) -> Markup:
    """The section, or nothing when no run of the report has ratings."""
    rows, about = calibrated_rows(entries)
    if not about:
        return Markup("")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.globals.update(cell=_cell, num=_num)
    return Markup(env.from_string(_SECTION).render(rows=rows, about=about))
