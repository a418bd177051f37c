"""Several engines serving one request stream: instances, routers, the KV link, topologies, and the
simulated clock that drives them (docs/engine.md#clusters). Plain Python, no torch.

Only simulated.py knows the clock: a measured cluster (one process per instance) reuses every other
module and brings its own clock and transport.
"""
