"""Reading finished runs: loading them (runs), comparing models (compare, compare_format), gating a build (gate), reading a judge panel (panel)."""
