"""Performance model: capacity, step times, the predicted curve, its knee, the timeout limit, cost."""

from sagellm.planner.calibration import Calibration, Observation, fit_calibration
from sagellm.planner.curve import (
    DEFAULT_CONCURRENCY,
    Curve,
    Point,
    curve_of,
    knee_index,
    knee_of,
    max_concurrency_in_timeout,
    predict,
    predict_point,
    step_time_notes,
    usd_per_1m_tokens,
)
from sagellm.planner.fit import fits, fitting_tps, valid_tp
from sagellm.planner.shape import Payload, Shape
from sagellm.planner.steps import StepModel

__all__ = [
    "DEFAULT_CONCURRENCY", "Calibration", "Curve", "Observation", "Payload", "Point", "Shape", "StepModel",
    "curve_of", "fit_calibration", "fits", "fitting_tps", "knee_index", "knee_of",
    "max_concurrency_in_timeout", "predict", "predict_point", "step_time_notes", "usd_per_1m_tokens", "valid_tp",
]
