"""How the peer tables name our engine before and after the probed linear layers (peers/compare.py
writes them, report/peer.py reads them)."""
BEFORE_LABEL, AFTER_LABEL = "MKL linear, SDPA prefill", "probed linear, paged prefill"
BEFORE_COLUMN = f"chunklab before ({BEFORE_LABEL})"
