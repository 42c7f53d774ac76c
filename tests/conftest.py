from __future__ import annotations

from pathlib import Path

import pytest

from tests.recorder import Recorder


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    return Recorder(tmp_path / "data")
