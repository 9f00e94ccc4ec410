"""The report's SVG charts: a whisker (a point and its interval), the pillar radar and a line chart over
categorical x. Built as strings here, not in the template, so that every text in them goes through
`escape` in one place."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")


def whisker_svg(value: float | None, ci: tuple[float, float] | None, lo: float = 0.0, hi: float = 100.0,
                width: int = 96, color: str = "#1f77b4") -> Markup:
    """A point with its interval on a [lo, hi] axis."""
    if value is None:
        return Markup("")

    def x(v: float) -> float:
        frac = 0.0 if hi == lo else (min(max(v, lo), hi) - lo) / (hi - lo)
        return round(2 + frac * (width - 4), 1)

    parts = [f'<svg class="whisker" width="{width}" height="14" viewBox="0 0 {width} 14" aria-hidden="true">',
             f'<line x1="2" y1="7" x2="{width - 2}" y2="7" class="axis"/>']
    if ci is not None:
        a, b = x(ci[0]), x(ci[1])
        parts.append(f'<line x1="{a}" y1="7" x2="{b}" y2="7" stroke="{color}" stroke-width="2"/>'
                     f'<line x1="{a}" y1="3" x2="{a}" y2="11" stroke="{color}"/>'
                     f'<line x1="{b}" y1="3" x2="{b}" y2="11" stroke="{color}"/>')
    parts.append(f'<circle cx="{x(value)}" cy="7" r="3.5" fill="{color}"/></svg>')
    return Markup("".join(parts))


def radar_svg(labels: list[str], series: list[tuple], size: int = 440) -> Markup:
    """Radar chart on 0-100 axes; one closed outline per model through the axes it has a value for. A series
    is (name, color, values) or (name, color, values, partial flags): a partial value's vertex is hollow,
    so that it is not read as measured like the others."""
    n = len(labels)
    if n < 3:
        return Markup("")
    width = size + 160  # room for the axis labels left and right
    cx, c, r = width / 2, size / 2, size / 2 - 64
    ang = [-math.pi / 2 + 2 * math.pi * i / n for i in range(n)]

    def pt(i: int, v: float) -> tuple[float, float]:
        return round(cx + r * v / 100 * math.cos(ang[i]), 1), round(c + r * v / 100 * math.sin(ang[i]), 1)

    out = [f'<svg id="radar" class="radar" width="{width}" height="{size}" viewBox="0 0 {width} {size}" '
           f'role="img" aria-label="radar chart of pillar trust scores">']
    for ring in (25, 50, 75, 100):
        pts = " ".join(f"{x},{y}" for x, y in (pt(i, ring) for i in range(n)))
        out.append(f'<polygon points="{pts}" class="ring"/>')
        out.append(f'<text x="{cx + 3}" y="{c - r * ring / 100 - 2:.1f}" class="tick">{ring}</text>')
    for i, lab in enumerate(labels):
        x, y = pt(i, 100)
        lx, ly = pt(i, 118)
        anchor = "middle" if abs(lx - cx) < 5 else ("start" if lx > cx else "end")
        out.append(f'<line x1="{cx}" y1="{c}" x2="{x}" y2="{y}" class="spoke"/>')
        out.append(f'<text x="{lx}" y="{ly + 4}" text-anchor="{anchor}" class="axis-label">{escape(lab)}</text>')
    for name, color, values, *rest in series:
        partial = rest[0] if rest else [False] * len(values)
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        if not present:
            continue
        pts = " ".join(f"{x},{y}" for x, y in (pt(i, v) for i, v in present))
        shape = "polygon" if len(present) > 2 else "polyline"
        out.append(f'<g class="series"><title>{escape(name)}</title>'
                   f'<{shape} points="{pts}" fill="{color}" fill-opacity="0.12" stroke="{color}" stroke-width="2"/>')
        for i, v in present:
            x, y = pt(i, v)
            fill, note = ("white", " (partial)") if partial[i] else (color, "")
            out.append(f'<circle cx="{x}" cy="{y}" r="3.5" fill="{fill}" stroke="{color}" stroke-width="1.5">'
                       f'<title>{escape(name)} · {escape(labels[i])}: {v:.1f}{note}</title></circle>')
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def curve_svg(xs: list[str], lines: list[tuple[str, str, list[float | None]]], width: int = 460,
              height: int = 200) -> Markup:
    """A line chart over categorical x (e.g. perturbation intensity)."""
    vals = [v for _, _, ys in lines for v in ys if v is not None]
    if not vals or len(xs) < 2:
        return Markup("")
    lo, hi = min(0.0, min(vals)), max(vals)
    hi = hi if hi > lo else lo + 1
    left, right, top, bottom = 44, 130, 12, 28

    def px(i: int) -> float:
        return round(left + i * (width - left - right) / (len(xs) - 1), 1)

    def py(v: float) -> float:
        return round(top + (hi - v) / (hi - lo) * (height - top - bottom), 1)

    out = [f'<svg class="curve" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<line x1="{left}" y1="{py(lo)}" x2="{width - right}" y2="{py(lo)}" class="axis"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(lo)}" class="axis"/>',
           f'<text x="{left - 4}" y="{py(hi) + 4}" text-anchor="end" class="tick">{hi:.2g}</text>',
           f'<text x="{left - 4}" y="{py(lo) + 4}" text-anchor="end" class="tick">{lo:.2g}</text>']
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i)}" y="{height - 8}" text-anchor="middle" class="tick">{escape(x)}</text>')
    for k, (name, color, ys) in enumerate(lines):
        pts = [(px(i), py(v)) for i, v in enumerate(ys) if v is not None]
        if not pts:
            continue
        out.append(f'<polyline points="{" ".join(f"{a},{b}" for a, b in pts)}" fill="none" stroke="{color}" '
                   f'stroke-width="2" stroke-dasharray="{"" if k % 2 == 0 else "5 3"}"><title>{escape(name)}</title>'
                   f'</polyline>')
        out.append(f'<text x="{width - right + 6}" y="{pts[-1][1] + 4}" class="tick" fill="{color}">'
                   f'{escape(name[:22])}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def survival_svg(lines: list[tuple[str, str, object]], *, rising: bool = False, width: int = 460,
                 height: int = 210, x_label: str = "chatbot message", t_max: int | None = None) -> Markup:
    """Step curves (survival.Curve per model) from message 0 at 1.0: S(t), or 1 - S(t) when `rising`
    (the share that has had the event). A tick marks a conversation censored there. A line may carry a
    band, (low, high) of S at t = 0, 1, ...: shaded behind its curve, steps as the curve's."""
    bands = {x[0]: x[3] for x in lines if len(x) > 3}
    curves = [(n, c, cv) for n, c, cv, *_ in lines if cv is not None and cv.n]
    if not curves:
        return Markup("")
    t_max = t_max or max([1] + [max((*cv.times, *cv.censored_at), default=1) for _, _, cv in curves])
    left, right, top, bottom = 40, 130, 12, 34

    def px(t: float) -> float:
        return round(left + t / t_max * (width - left - right), 1)

    def py(v: float) -> float:
        return round(top + (1 - v) * (height - top - bottom), 1)

    out = [f'<svg class="curve survival" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<line x1="{left}" y1="{py(0)}" x2="{width - right}" y2="{py(0)}" class="axis"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(0)}" class="axis"/>',
           f'<text x="{left - 4}" y="{py(1) + 4}" text-anchor="end" class="tick">1</text>',
           f'<text x="{left - 4}" y="{py(0) + 4}" text-anchor="end" class="tick">0</text>',
           f'<text x="{px(0)}" y="{height - 18}" text-anchor="middle" class="tick">0</text>',
           f'<text x="{px(t_max)}" y="{height - 18}" text-anchor="middle" class="tick">{t_max}</text>',
           f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle" class="tick">'
           f'{escape(x_label)}</text>']
    for k, (name, color, cv) in enumerate(curves):
        def y_of(s: float) -> float:
            return py(1 - s if rising else s)
        band = bands.get(name)
        if band is not None:  # the step band: each message's interval held until the next message
            def steps(values) -> list[tuple[float, float]]:
                return [(px(x), y_of(v)) for t, v in enumerate(values) for x in (t, min(t + 1, t_max))]
            ring = steps(band[1]) + steps(band[0])[::-1]
            out.append(f'<polygon class="band" points="{" ".join(f"{a},{b}" for a, b in ring)}" fill="{color}" '
                       f'fill-opacity="0.15" stroke="none"><title>{escape(name)}: 95% interval (personas resampled)'
                       f'</title></polygon>')
        pts, s = [(px(0), y_of(1.0))], 1.0
        for t, v in zip(cv.times, cv.survival):
            pts += [(px(t), y_of(s)), (px(t), y_of(v))]
            s = v
        pts.append((px(t_max), y_of(s)))
        out.append(f'<polyline points="{" ".join(f"{a},{b}" for a, b in pts)}" fill="none" stroke="{color}" '
                   f'stroke-width="2" stroke-dasharray="{"" if k % 2 == 0 else "5 3"}"><title>{escape(name)}: '
                   f'{cv.events} of {cv.n} conversations</title></polyline>')
        for t in sorted(set(cv.censored_at)):
            y = y_of(cv.at(t))
            out.append(f'<line x1="{px(t)}" y1="{y - 4}" x2="{px(t)}" y2="{y + 4}" stroke="{color}"/>')
        out.append(f'<text x="{width - right + 6}" y="{pts[-1][1] + 4}" class="tick" fill="{color}">'
                   f'{escape(name[:22])}</text>')
    out.append("</svg>")
    return Markup("".join(out))
