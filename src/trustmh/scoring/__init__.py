"""From scored samples to numbers: metrics and the bootstrap (metrics), inter-rater agreement (agreement), trust, pillar and overall aggregation (pillars), results.json's schema (results).

This package's own namespace holds only constants that the command line and the run's spec read before
any request is sent; its modules (numpy, pydantic) load when scoring needs them."""

# Judges whose alpha is under this agree too little for their panel's value to be read as one verdict:
# Krippendorff's lowest level for "tentative conclusions" (Content Analysis, 2004, sec. 12.4).
ALPHA_MIN = 0.667
