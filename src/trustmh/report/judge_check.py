"""The "Checking the judge" report section: per criterion and statistic, the judge against the humans,
the human ceiling and the verdict, from a validate-judge run's agreement.json.

`judge_check_section(agreement)` is the section alone (an HTML fragment another page can embed);
`judge_check_html(agreement)` a whole self-contained page, what `trustmh validate-judge` writes as its
report.html. Every text (criterion and rater names come from the user's file) passes jinja2's autoescape;
the page has no script and a Content-Security-Policy that allows nothing but its own inline style."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..scoring.agreement import BELOW, MARGIN, STAT_NAMES, WITHIN

_SECTION = """
<section id="judge-check">
<h2>Checking the judge</h2>
<p class="note">Judge <code>{{ a.judge }}</code>{% if a.rubric %}, rubric <code>{{ a.rubric }}</code>{% endif %}.
Each statistic compares the judge with every human rater on the items both rated (averaged over raters);
the human ceiling is the same statistic for each human against the other humans (leave one out). The
verdict reads the paired bootstrap interval of judge &minus; ceiling: <b>below</b> when all of it is under 0,
<b>within</b> when its lower end is no lower than &minus;{{ margin }}, <b>inconclusive</b> otherwise (more items needed).
{% if a.lines_left_out %}Lines left out of the set:
{% for why, n in a.lines_left_out.items() %}{{ n }} &times; {{ why }}{% if not loop.last %}; {% endif %}{% endfor %}.{% endif %}</p>
{% for c in a.criteria %}
<h3>{{ c.criterion }} <small class="note">{{ c.n_items }} items judged; raters {{ c.raters | join(", ") }}</small></h3>
<div class="scroll"><table>
<tr><th>statistic</th><th>judge vs humans</th><th>human ceiling</th><th>judge &minus; ceiling</th><th>verdict</th></tr>
{% for s, v in c.statistics.items() %}
<tr><td>{{ names.get(s, s) }}</td><td>{{ cell(v.judge, v.judge_ci) }}</td><td>{{ cell(v.ceiling, v.ceiling_ci) }}</td>
<td>{{ cell(v.diff, v.diff_ci) }}</td>
<td class="{{ 'warn' if v.verdict == below else ('good' if v.verdict == within else 'note') }}">{{ v.verdict }}</td></tr>
{% endfor %}
{% if c.bias is defined and c.bias %}<tr><td>bias (judge &minus; human)</td><td>{{ cell(c.bias.value, c.bias.ci) }}</td>
<td colspan="3" class="note">the judge's mean difference from a person on this scale: above 0 it rates higher</td></tr>{% endif %}
</table></div>
{% endfor %}
</section>
"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>trustmh: checking the judge</title>
<style>{{ css }}
.good { color: var(--good); }</style></head>
<body><main>{{ section }}</main></body></html>
"""


def _cell(value: float | None, ci: list[float] | tuple[float, float] | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.globals.update(cell=_cell, names=STAT_NAMES, below=BELOW, within=WITHIN, margin=MARGIN)
    return env


def judge_check_section(agreement: dict[str, Any]) -> Markup:
    """The section as HTML (agreement: the content of a validate-judge run's agreement.json)."""
    return Markup(_env().from_string(_SECTION).render(a=agreement))


def judge_check_html(agreement: dict[str, Any]) -> str:
    css = (Path(__file__).parent / "report.css").read_text(encoding="utf-8")
    return _env().from_string(_PAGE).render(css=Markup(css), section=judge_check_section(agreement))
