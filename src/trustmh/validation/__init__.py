"""Judges checked against humans: `trustmh validate-judge` on the crisis-escalation raters (judge) and on any human-rated file (human_ratings)."""
