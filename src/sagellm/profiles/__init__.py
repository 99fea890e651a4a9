"""Profiles: schema, the standard ones, resolve() → DeploymentPlan.

The public hand-off is this package: `design_for` → a `Design` (the serving shape, the price, the engine and
its environment; `.plan()` → the DeploymentPlan), or `resolve` straight to the DeploymentPlan. Nothing outside
`sagellm.profiles` imports its modules' internals (an import-linter contract).
"""

from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, ModelDeployment, ScalingPlan
from sagellm.profiles.resolve import Design, design_for, profile_payload, resolve

__all__ = ["ComputeRequirements", "DeploymentPlan", "Design", "ModelDeployment", "ScalingPlan", "design_for",
           "profile_payload", "resolve"]
