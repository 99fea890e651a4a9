"""`sagellm recommend`: from an SLO and a load to the cheapest deployment predicted to meet it, as a profile.

slo (the target) → search (every shape of the model in the catalog, predicted at the load) → choose (the pick,
the frontier, why each other lost) → write (table, JSON, plot, profile YAML).
"""

from sagellm.recommend.choose import PeakSizing, Recommendation, choose
from sagellm.recommend.search import (
           Candidate,
           Config,
           Space,
           concurrency_for_rate,
           instance_types,
           search,
)
from sagellm.recommend.slo import Load, load_slo
from sagellm.recommend.write import frontier_markdown, write_all

__all__ = ["Candidate", "Config", "Load", "PeakSizing", "Recommendation", "Space", "choose",
           "concurrency_for_rate", "frontier_markdown", "instance_types", "load_slo", "search", "write_all"]
