"""The vLLM plugin's settings, names and messages: what the environment asks it to record.

Standard library only (and :mod:`specreplay.errors`; :mod:`specreplay.sim.arms` when an arm is
set): :mod:`specreplay.capture.vllm_v1`, which vLLM imports in every process, and the tensor side
:mod:`specreplay.capture.vllm_rounds` both import it, so neither imports the other at load.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from specreplay.errors import SpecReplayError

__all__ = [
    "COMMIT_IDLE_SECONDS",
    "COMMIT_ROUNDS",
    "COMMIT_SECONDS",
    "ENV_ARM",
    "ENV_COMMIT_IDLE",
    "ENV_COMMIT_ROUNDS",
    "ENV_COMMIT_SECONDS",
    "ENV_FAMILY",
    "ENV_FOLDER",
    "ENV_QUEUE",
    "ENV_SAMPLE",
    "ENV_TOP_K",
    "RUNNER_MODULE",
    "RUNNER_V2_MODULE",
    "SAMPLER_MODULE",
    "V2_MESSAGE",
    "VLLM_VERSION",
    "CaptureSettings",
    "log",
    "settings_from_env",
]

VLLM_VERSION = "0.33.0"
"""The vLLM release whose source this adapter follows."""
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
RUNNER_V2_MODULE = "vllm.v1.worker.gpu.model_runner"
V2_MESSAGE = (
    "specreplay capture records nothing in this engine: vLLM selected Model Runner V2, which the "
    "plugin does not hook; set VLLM_USE_V2_MODEL_RUNNER=0 to run the V1 runner, which it records"
)
"""The one line said (vLLM's log, the manifest) when vLLM builds Model Runner V2."""

ENV_FOLDER = "SPECREPLAY_CAPTURE"
ENV_SAMPLE = "SPECREPLAY_CAPTURE_SAMPLE"
ENV_TOP_K = "SPECREPLAY_CAPTURE_TOP_K"
ENV_ARM = "SPECREPLAY_CAPTURE_ARM"
ENV_FAMILY = "SPECREPLAY_CAPTURE_FAMILY"
ENV_QUEUE = "SPECREPLAY_CAPTURE_QUEUE_ROUNDS"
ENV_COMMIT_ROUNDS = "SPECREPLAY_CAPTURE_COMMIT_ROUNDS"
ENV_COMMIT_SECONDS = "SPECREPLAY_CAPTURE_COMMIT_SECONDS"
ENV_COMMIT_IDLE = "SPECREPLAY_CAPTURE_COMMIT_IDLE_SECONDS"
COMMIT_ROUNDS = 10_000  # the recorder's defaults (capture/recorder.py), repeated: no import here
COMMIT_SECONDS = 60.0
COMMIT_IDLE_SECONDS = 2.0

# a child of vLLM's "vllm" logger: the plugin's lines go through vLLM's handler and format
# (vllm/logger.py, DEFAULT_LOGGING_CONFIG), at vLLM's level, to vLLM's stream
log = logging.getLogger("vllm.specreplay")


# ------------------------------------------------------------------------------------------------
# settings
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureSettings:
    """What the environment asks the plugin to record (:func:`settings_from_env`).

    Attributes
    ----------
    folder : str
        The capture folder (``SPECREPLAY_CAPTURE``): every process appends its writer to it.
    sample : float
        Fraction of requests recorded, by request-id hash (``SPECREPLAY_CAPTURE_SAMPLE``, 1).
    top_k : int
        Candidates kept per position when the drafter gives ``draft_probs``
        (``SPECREPLAY_CAPTURE_TOP_K``, 32).
    logging_arm : str or None
        The one arm recorded (``SPECREPLAY_CAPTURE_ARM``, canonical); None: the first round's.
    family : str
        The ``family`` of every row (``SPECREPLAY_CAPTURE_FAMILY``, ``vllm``).
    queue_rounds : int
        The recorder's queue, in rounds (``SPECREPLAY_CAPTURE_QUEUE_ROUNDS``, 4096).
    commit_rounds, commit_seconds, commit_idle_seconds : int, float, float
        Periodic commits (``SPECREPLAY_CAPTURE_COMMIT_ROUNDS``, 10,000;
        ``SPECREPLAY_CAPTURE_COMMIT_SECONDS``, 60; ``SPECREPLAY_CAPTURE_COMMIT_IDLE_SECONDS``,
        2: an engine idle that long has committed every round): a killed engine loses at most
        the rounds since the last commit (docs/record-vllm.md).
    """

    folder: str
    sample: float = 1.0
    top_k: int = 32
    logging_arm: str | None = None
    family: str = "vllm"
    queue_rounds: int = 4096
    commit_rounds: int = COMMIT_ROUNDS
    commit_seconds: float = COMMIT_SECONDS
    commit_idle_seconds: float = COMMIT_IDLE_SECONDS


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SpecReplayError(f"{name}={text!r}: expected an integer ≥ 1")
    return value


def _seconds_env(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SpecReplayError(f"{name}={text!r}: expected a number of seconds > 0")
    return value


def settings_from_env(env: Mapping[str, str] | None = None) -> CaptureSettings | None:
    """Read the capture settings from the environment; None when capture is off.

    Parameters
    ----------
    env : Mapping[str, str], optional
        The environment (``os.environ`` by default).

    Returns
    -------
    CaptureSettings or None
        None when ``SPECREPLAY_CAPTURE`` is unset or empty.

    Raises
    ------
    SpecReplayError
        One line naming the variable whose value is malformed.

    Examples
    --------
    >>> settings_from_env({}) is None
    True
    >>> s = settings_from_env({"SPECREPLAY_CAPTURE": "/c", "SPECREPLAY_CAPTURE_ARM": "greedy@4"})
    >>> s.folder, s.sample, s.top_k, s.logging_arm, s.family, s.queue_rounds
    ('/c', 1.0, 32, 'greedy@4', 'vllm', 4096)
    >>> settings_from_env({"SPECREPLAY_CAPTURE": "/tmp/cap", "SPECREPLAY_CAPTURE_SAMPLE": "2"})
    Traceback (most recent call last):
    ...
    specreplay.errors.SpecReplayError: SPECREPLAY_CAPTURE_SAMPLE='2': expected a number in (0, 1]
    """
    env = os.environ if env is None else env
    folder = env.get(ENV_FOLDER, "").strip()
    if not folder:
        return None
    sample_text = env.get(ENV_SAMPLE, "").strip() or "1"
    try:
        sample = float(sample_text)
    except ValueError:
        sample = math.nan
    if not (math.isfinite(sample) and 0.0 < sample <= 1.0):
        raise SpecReplayError(f"{ENV_SAMPLE}={sample_text!r}: expected a number in (0, 1]")
    arm_text = env.get(ENV_ARM, "").strip()
    arm = None
    if arm_text:
        from specreplay.sim.arms import parse_arm  # no Numba (specreplay/sim/__init__.py)

        try:
            arm = parse_arm(arm_text).canonical
        except SpecReplayError as e:
            raise SpecReplayError(f"{ENV_ARM}: {e}") from None
    return CaptureSettings(
        folder=folder,
        sample=sample,
        top_k=_int_env(env, ENV_TOP_K, 32),
        logging_arm=arm,
        family=env.get(ENV_FAMILY, "vllm"),
        queue_rounds=_int_env(env, ENV_QUEUE, 4096),
        commit_rounds=_int_env(env, ENV_COMMIT_ROUNDS, COMMIT_ROUNDS),
        commit_seconds=_seconds_env(env, ENV_COMMIT_SECONDS, COMMIT_SECONDS),
        commit_idle_seconds=_seconds_env(env, ENV_COMMIT_IDLE, COMMIT_IDLE_SECONDS),
    )
