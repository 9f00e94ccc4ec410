"""From scored samples to numbers: metrics and the bootstrap (metrics), inter-rater agreement (agreement), trust, pillar and overall aggregation (pillars), results.json's schema (results)."""
