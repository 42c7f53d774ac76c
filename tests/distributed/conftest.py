"""Shared by the distributed-build tests: one Spark session on a real two-executor
cluster (``local-cluster[2,1,1024]``: a master, two workers, two executor JVMs, a real
shuffle between them) and a local S3 endpoint (moto's server on 127.0.0.1) whose address
the executors inherit, both for the whole test process: a JVM start costs 10-20 s, and a
Spark session started again in the same process runs in the JVM of the first, with the
environment (the endpoint) that JVM started with. Also a randomized data set (its seed is
in every assertion message) and its single-node model."""

from __future__ import annotations

import logging
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from retryscope.analytics import connect
from retryscope.analytics.distributed import spark_session
from tests.recorder import MS, T0, Recorder
from tests.test_analytics_randomized import _generate

MASTER = "local-cluster[2,1,1024]"
HOUR = 3_600 * 10**9
SEED = random.randrange(2**32)
JAVA = bool(os.environ.get("JAVA_HOME") or shutil.which("java"))
NO_JAVA = (
    "Spark needs a Java 17+ runtime and none could be installed "
    "(make test installs Debian's openjdk-17-jre-headless when run as root)"
)


@pytest.fixture(scope="session")
def object_store() -> Iterator[str]:
    """An S3 endpoint on 127.0.0.1, named by the standard AWS variables (set before the
    Spark session starts, so its executors and their Python workers inherit them)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ENDPOINT_URL", endpoint)
        env.setenv("AWS_ACCESS_KEY_ID", "retryscope-test")
        env.setenv("AWS_SECRET_ACCESS_KEY", "retryscope-test")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_REGION", "us-east-1")
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def _spark_process(object_store: str) -> Iterator[None]:
    """Stops the process's Spark session, if one is running, when the tests are done."""
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


@pytest.fixture(scope="module")
def spark(_spark_process: None) -> object:
    """The running session, or a new one in the same JVM when a test stopped it (the
    model command stops its session when done, and test files run in any order)."""
    return spark_session(MASTER, conf={"spark.task.maxFailures": "2"})


@pytest.fixture(scope="package")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random retry structure (``_generate``) in clusters just before three hour
    boundaries (requests straddling time partitions), one file's spans delivered again
    in another partition (copies counted once), and a corrupt file (skipped by both)."""
    root = tmp_path_factory.mktemp("spans")
    rng = random.Random(SEED)
    first_hour = T0 // HOUR * HOUR
    starts = sorted(
        first_hour + (h + 1) * HOUR - rng.randint(0, 300) * MS - k * 20 * MS
        for h in range(3)
        for k in range(300)
    )
    rec = Recorder(root)
    _generate(rec, len(starts), seed=SEED, starts=starts)
    rec.connect()
    hours = sorted({p.parent for p in root.rglob("*.parquet")})
    copied = sorted(hours[0].glob("*.parquet"))[0]
    shutil.copy2(copied, hours[1] / f"again-{copied.name}")
    (hours[-1] / "spans-corrupt.parquet").write_bytes(b"PAR1 not a parquet file")
    return root


@pytest.fixture(scope="package")
def single(data: Path) -> duckdb.DuckDBPyConnection:
    """The single-node model of the data set, built once."""
    con, _ = connect(data)
    con.build()
    return con
