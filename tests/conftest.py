import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import os
import tempfile

# engine.profile=auto in tests: smoke-sized calibrations (seconds), cached apart from the project's
# own per-machine profiles (calibration/machine.py), shared by the test workers and later test runs.
os.environ.setdefault("CHUNKLAB_CALIBRATION", "smoke")
os.environ.setdefault("CHUNKLAB_PROFILE_CACHE", str(Path(tempfile.gettempdir()) / f"chunklab-test-profiles-{os.getuid()}"))
