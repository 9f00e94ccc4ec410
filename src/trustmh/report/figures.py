"""`trustmh report --figures DIR`: the paper's two figures for a paper of one's own, as SVG and PNG.

* `ranks-heatmap`: the rank table (ranks.py, the very records the CSV holds) as a heat map, a row per
  subtask and a column per model, each cell its rank as the table marks it (* ranked apart, † a broken tie),
  darker for a better rank, as the paper's rank figure shades it.
* `pillars-radar`: the leaderboard's pillar trust scores (trustmh's own aggregation), a line per model;
  a partial pillar's vertex is hollow, as in the report.

matplotlib is an optional extra (`pip install "trustmh[figures]"`), imported here only: the offline run and
the report need none of it. Text stays text in the SVG (`svg.fonttype: none`), so a figure's words can be
searched, copied and checked; each heat-map cell's text has the id `cell-<row>-<column>` in table order."""

from __future__ import annotations

import io
import math
from pathlib import Path

from ..errors import UserError
from .leaderboard import Board
from .ranks import RankTable, rank_grid, rank_text

STYLE = {"svg.fonttype": "none", "svg.hashsalt": "trustmh", "font.size": 9, "font.family": "DejaVu Sans"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError('--figures needs matplotlib: pip install "trustmh[figures]"') from None
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    return plt


def write_figures(table: RankTable, board: Board, labels: list[str], pillars: list[str], out_dir: Path) -> list[Path]:
    """Both figures, each as .svg and .png, into `out_dir` (made if absent); the paths written."""
    from ..files import atomic_write
    out_dir = Path(out_dir)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise UserError(f"--figures {out_dir}: not a folder (a link or a file); give a folder to write into")
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(STYLE):
        for name, fig in (("ranks-heatmap", _heatmap(plt, table)), ("pillars-radar", _radar(plt, board, labels,
                                                                                            pillars))):
            for ext in ("svg", "png"):
                buf = io.BytesIO()
                fig.savefig(buf, format=ext, dpi=200, bbox_inches="tight", metadata=_metadata(ext))
                path = out_dir / f"{name}.{ext}"
                atomic_write(path, buf.getvalue())
                written.append(path)
            plt.close(fig)
    return written


def _metadata(ext: str) -> dict:
    # No creation date: the same runs give the same files.
    return {"Date": None} if ext == "svg" else {"Software": "trustmh"}


def _heatmap(plt, table: RankTable):
    import numpy as np
    from ..scoring.pillars import PILLAR_NAMES
    grid = rank_grid(table)
    n_models = len(table.columns)
    ranks = np.array([[math.nan if rec["rank"] is None else rec["rank"] for rec in recs] for _, recs in grid],
                     dtype=float).reshape(len(grid), n_models)
    fig, ax = plt.subplots(figsize=(2.6 + 0.62 * n_models, 0.9 + 0.3 * len(grid)))
    worst = max(n_models, 2)
    ax.imshow(ranks, cmap="Greens_r", vmin=1, vmax=worst + 2, aspect="auto")  # rank 1 darkest
    for i, (r, recs) in enumerate(grid):
        for j, rec in enumerate(recs):
            shade = rec["rank"] is not None and rec["rank"] <= worst / 2
            t = ax.text(j, i, rank_text(rec) or "–", ha="center", va="center", fontsize=6 if rec["undefined"] else 8,
                        color="white" if shade else "black")
            t.set_gid(f"cell-{i}-{j}")
    ax.set_xticks(range(n_models), [table.labels[i] for i in table.columns], rotation=40, ha="right",
                  rotation_mode="anchor")
    rows = [f"{r.row}{' (beyond the paper)' if r.beyond else ''}" for r, _ in grid]
    ax.set_yticks(range(len(grid)), rows)
    for k, (r, _) in enumerate(grid):
        if r.span:  # a pillar's rows: a white rule above, its name on the right
            if k:
                ax.axhline(k - 0.5, color="white", linewidth=2)
            ax.text(n_models - 0.3, k + (r.span - 1) / 2, PILLAR_NAMES.get(r.pillar, r.pillar), va="center",
                    fontsize=8, style="italic")
    start = 0
    for g, n in table.groups:
        ax.text(start + (n - 1) / 2, -0.8, g, ha="center", va="bottom", fontweight="bold")
        if start:
            ax.axvline(start - 0.5, color="white", linewidth=2)
        start += n
    ax.set_title("Rank per subtask (1 = best; * ranked apart, † tie broken, undefined: a null value)", fontsize=9, pad=18)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    return fig


def _radar(plt, board: Board, labels: list[str], pillars: list[str]):
    from ..scoring.pillars import PILLAR_NAMES
    from .charts import PALETTE
    import textwrap
    n = len(pillars)
    angles = [2 * math.pi * k / max(n, 1) for k in range(n)]
    fig = plt.figure(figsize=(6.4, 5.2))
    ax = fig.add_subplot(projection="polar")
    ax.set_theta_offset(math.pi / 2)  # the first pillar at the top, then clockwise, as the report draws it
    ax.set_theta_direction(-1)
    for k, i in enumerate(board.order):
        color = PALETTE[i % len(PALETTE)]
        cells = [board.cells[(i, p)] for p in pillars]
        pts = [(a, c.score, bool(c.partial)) for a, c in zip(angles, cells) if c.score is not None]
        if not pts:
            continue
        closed = pts + pts[:1] if len(pts) > 2 else pts
        ax.plot([a for a, _, _ in closed], [v for _, v, _ in closed], color=color, linewidth=1.4, label=labels[i])
        for a, v, partial in pts:
            ax.plot([a], [v], marker="o", markersize=4.5, color=color, markerfacecolor="white" if partial else color)
    ax.set_xticks(angles, [textwrap.fill(PILLAR_NAMES.get(p, p), 16) for p in pillars])
    ax.set_ylim(0, 100)
    ax.set_yticks([25, 50, 75, 100], ["25", "50", "75", "100"], fontsize=7)
    ax.set_title("Pillar trust scores (0–100; trustmh's aggregation; hollow: partial)", fontsize=9, pad=16)
    ax.legend(loc="upper left", bbox_to_anchor=(1.08, 1.0), frameon=False, fontsize=8)
    return fig
