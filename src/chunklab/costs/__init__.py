"""Fits of the roofline cost model (engine/cost_models/roofline.py) on measured data: Vidur's H100 operator
times, TinyGPT's calibration probe on this CPU. They use the same formulas that predict."""
