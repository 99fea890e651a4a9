"""Profiles: schema, the standard ones, resolve() → DeploymentPlan."""

from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, ModelDeployment, ScalingPlan
from sagellm.profiles.resolve import Design, design_for, resolve

__all__ = ["ComputeRequirements", "DeploymentPlan", "Design", "ModelDeployment", "ScalingPlan", "design_for",
           "resolve"]
