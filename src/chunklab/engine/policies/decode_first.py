"""The chapter's policy: every decoding sequence gets its token first, then in-flight prefills
continue (oldest first), then new requests are admitted with what is left."""
from chunklab.engine.policies.base import OrderingPolicy, Part


class DecodeFirst(OrderingPolicy):
    name = "decode_first"
    parts = (Part.DECODES, Part.PREFILLS, Part.ADMISSIONS)
