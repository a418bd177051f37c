"""Fits of the cost models on measured data, with the same formulas that predict:
- profile.py: the linear model of a calibrated profile, on this machine's probed and served steps
  (calibration/ measures them and writes the profile);
- vidur.py: the roofline's efficiencies on Vidur's H100 and A100 operator times;
- cpu.py: the roofline's efficiencies on TinyGPT's calibration probe on this CPU."""
