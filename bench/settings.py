"""What one ``python -m bench`` run was asked to do: sizes, rounds, where data is cached."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FULL_ATTEMPTS = 10_000_000
HUGE_ATTEMPTS = 100_000_000
QUICK_ATTEMPTS = 20_000


@dataclass(frozen=True, slots=True)
class Settings:
    quick: bool = False
    huge: bool = False
    seed: int = 42
    attempts: int = FULL_ATTEMPTS
    data_dir: Path = Path("bench-data")
    rounds: int = 7
    huge_memory_limit: str = "2GB"  # 100 M attempts: 386 hourly partitions, two built at a time
    bounded_memory_limit: str = "1.5GB"  # the first run built into a cache within 2 GiB

    @classmethod
    def make(
        cls,
        *,
        quick: bool,
        huge: bool,
        seed: int,
        attempts: int | None,
        data_dir: Path,
        rounds: int | None,
    ) -> Settings:
        default_attempts = QUICK_ATTEMPTS if quick else FULL_ATTEMPTS
        return cls(
            quick=quick,
            huge=huge,
            seed=seed,
            attempts=attempts if attempts is not None else default_attempts,
            data_dir=data_dir,
            rounds=rounds if rounds is not None else (3 if quick else 7),
        )

    def scaled(self, full: int, quick: int) -> int:
        """A loop size: ``full`` normally, ``quick`` for a smoke run."""
        return quick if self.quick else full
