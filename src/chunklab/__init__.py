"""chunklab: chunked prefill under a token budget, measured and simulated."""
from chunklab import compiled_core

compiled_core.install()  # the scheduling core from its mypyc build, where one of these sources exists
