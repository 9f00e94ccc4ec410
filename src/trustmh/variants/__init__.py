"""Text variants of items: seeded perturbations (robustness) and identity statements (fairness).

Both only produce new text for the person's own words; a task's `perturb(item, edit)` decides where
that text sits, so instructions, options and labels are never touched."""

from .demographics import ATTRIBUTES, CONTROL, Identity, identities
from .perturb import INTENSITIES, KINDS, Perturbation, make_edit, perturb_text, perturbations

__all__ = ["ATTRIBUTES", "CONTROL", "INTENSITIES", "KINDS", "Identity", "Perturbation", "identities",
           "make_edit", "perturb_text", "perturbations"]
