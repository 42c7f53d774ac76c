"""The UI's whole-data-set figures kept beside the model cache: the store lives in
:mod:`retryscope.analytics._figures` (``retryscope report`` writes to it too, without the
UI's dependencies)."""

from retryscope.analytics._figures import (
    FOLDER,
    STORED,
    TOTAL,
    FigureStore,
    Fingerprint,
    code_digest,
    fingerprint,
)

__all__ = ["FOLDER", "STORED", "TOTAL", "FigureStore", "Fingerprint", "code_digest", "fingerprint"]
