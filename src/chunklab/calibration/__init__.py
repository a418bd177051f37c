"""Calibration: profile the real engine over step shapes, fit a step-cost model."""
