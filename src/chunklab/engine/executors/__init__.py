"""Executors: what runs a StepPlan and returns the sampled tokens (engine.Executor). engine.executor
chooses one through engine/build.py's EXECUTORS registry:
- model_runner.py (torch): the real forward pass over the paged KV pool, imported only where torch is;
- simulated.py: no forward pass, placeholder tokens; the cost model's prediction is the step's time."""
