"""Performance model: capacity, step times, the predicted curve, its knee, the timeout limit, cost."""

from sagellm.planner.curve import (
    DEFAULT_CONCURRENCY,
    Curve,
    Point,
    knee_index,
    knee_of,
    max_concurrency_in_timeout,
    predict,
    predict_point,
    usd_per_1m_tokens,
)
from sagellm.planner.shape import Payload, Shape
from sagellm.planner.steps import StepModel

__all__ = [
    "DEFAULT_CONCURRENCY", "Curve", "Payload", "Point", "Shape", "StepModel",
    "knee_index", "knee_of", "max_concurrency_in_timeout", "predict", "predict_point", "usd_per_1m_tokens",
]
