import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import os
import tempfile

# engine.profile=auto in tests: smoke-sized calibrations (seconds), cached apart from the project's
# own per-machine profiles (calibration/machine.py), shared by the test workers and later test runs.
os.environ.setdefault("CHUNKLAB_CALIBRATION", "smoke")
os.environ.setdefault("CHUNKLAB_PROFILE_CACHE", str(Path(tempfile.gettempdir()) / f"chunklab-test-profiles-{os.getuid()}"))
# engine.linear_library=auto in tests: probed under the suite's own load, so cached apart from the
# project's .cache/linear_library/, which a real run reads (model/linear_library.py).
os.environ.setdefault("CHUNKLAB_LINEAR_CACHE", str(Path(tempfile.gettempdir()) / f"chunklab-test-linear-{os.getuid()}"))
