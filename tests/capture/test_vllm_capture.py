"""The vLLM plugin on vLLM-layout tensors (issue 12, item 3): rows equal a hand computation.

vLLM is not installed: a stand-in package named and shaped as vLLM 0.33.0's is written to
tmp_path (``vllm.v1.sample.rejection_sampler`` with ``rejection_sample`` and ``RejectionSampler``,
``vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample``). Its ``rejection_sample`` follows
vLLM's kernels (``_rejection_greedy_sample_kernel``: accept iff the draft is the target's argmax;
``_rejection_random_sample_kernel``: accept iff q > 0 and p/q ≥ u, q = 1 without ``draft_probs``,
a -1 draft rejected) with injected uniforms u, as vLLM's own tests patch them. The expected rows
are computed here with NumPy in float64 from the same inputs, never with the adapter's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch

from specreplay import api
from specreplay.capture import vllm_v1

STANDIN = {
    "vllm/__init__.py": '__version__ = "0.33.0+standin"\n',
    "vllm/v1/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/sample/rejection_sampler.py": """
        import torch

        PLACEHOLDER_TOKEN_ID = -1
        GREEDY_TEMPERATURE = 0
        UNIFORMS = None  # (num_tokens,) the test's uniform draws (vLLM: generate_uniform_probs)


        def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                             draft_probs, target_logits, bonus_token_ids, sampling_metadata,
                             synthetic_mode=False, synthetic_conditional_rates=None,
                             use_fp64_gumbel=False, fly_window_size=None,
                             fly_entropy_threshold=None, fly_entropy_top_k=3):
            batch_size = len(num_draft_tokens)
            out = torch.full((batch_size, max_spec_len + 1), PLACEHOLDER_TOKEN_ID,
                             dtype=torch.int32)
            target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
            argmax = target_logits.argmax(dim=-1)
            start = 0
            for i, n in enumerate(num_draft_tokens):
                greedy = sampling_metadata.all_greedy or (
                    float(sampling_metadata.temperature[i]) == GREEDY_TEMPERATURE)
                rejected = False
                for pos in range(n):
                    j = start + pos
                    d = int(draft_token_ids[j])
                    if d < 0:
                        ok = False
                    elif greedy:
                        ok = d == int(argmax[j])
                    else:
                        q = 1.0 if draft_probs is None else float(draft_probs[j, d])
                        ok = q > 0 and float(target_probs[j, d]) / q >= float(UNIFORMS[j])
                    if ok:
                        out[i, pos] = d
                    else:
                        out[i, pos] = int(argmax[j])  # the stand-in's "recovered" token
                        rejected = True
                        break
                if not rejected:
                    out[i, n] = int(bonus_token_ids[i])
                start += n
            return out


        def apply_sampling_constraints(logits, cu_num_draft_tokens, sampling_metadata):
            if sampling_metadata.all_greedy:
                return logits
            counts = torch.diff(cu_num_draft_tokens, prepend=cu_num_draft_tokens.new_zeros(1))
            t = sampling_metadata.temperature.repeat_interleave(counts)
            t = torch.where(t == GREEDY_TEMPERATURE, torch.ones_like(t), t)
            return logits.div_(t.unsqueeze(-1))  # no top-k / top-p in the stand-in


        class RejectionSampler:
            def __call__(self, metadata, draft_probs, logits, sampling_metadata):
                bonus = logits[metadata.bonus_logits_indices].argmax(dim=-1)
                target_logits = logits[metadata.target_logits_indices].to(torch.float32)
                target_logits = apply_sampling_constraints(
                    target_logits, metadata.cu_num_draft_tokens, sampling_metadata)
                return rejection_sample(
                    metadata.draft_token_ids, metadata.num_draft_tokens, metadata.max_spec_len,
                    metadata.cu_num_draft_tokens, draft_probs, target_logits, bonus,
                    sampling_metadata, synthetic_mode=False, synthetic_conditional_rates=None,
                    use_fp64_gumbel=False, fly_window_size=None, fly_entropy_threshold=None,
                    fly_entropy_top_k=3)
    """,
    "vllm/v1/worker/gpu_model_runner.py": """
        from types import SimpleNamespace

        import numpy as np

        from vllm.v1.sample.rejection_sampler import RejectionSampler


        class InputBatch:
            def __init__(self, req_ids, num_computed_tokens, temperatures, sampling_metadata):
                self._req_ids = list(req_ids)
                self.num_computed_tokens_cpu = np.asarray(num_computed_tokens, dtype=np.int32)
                self.temperature_cpu = np.asarray(temperatures, dtype=np.float32)
                self.sampling_metadata = sampling_metadata

            @property
            def req_ids(self):
                return self._req_ids


        class GPUModelRunner:
            def __init__(self, num_spec_tokens, method):
                self.num_spec_tokens = num_spec_tokens
                self.speculative_config = SimpleNamespace(method=method)
                self.rejection_sampler = RejectionSampler()
                self.input_batch = None
                self.draft_probs = None

            def _sample(self, logits, spec_decode_metadata):
                return self.rejection_sampler(spec_decode_metadata, self.draft_probs, logits,
                                              self.input_batch.sampling_metadata)
    """,
}


def write_standin(root: Path) -> Path:
    """Write the stand-in vllm package under ``root``; return ``root``."""
    for rel, text in STANDIN.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def metadata(drafts: list[list[int]]) -> SimpleNamespace:
    """SpecDecodeMetadata as vllm/v1/spec_decode/metadata.py lays it out (CPU tensors)."""
    n = [len(d) for d in drafts]
    cu_sampled = np.cumsum([k + 1 for k in n])
    target_idx = [s - k - 1 + p for s, k in zip(cu_sampled, n, strict=True) for p in range(k)]
    return SimpleNamespace(
        draft_token_ids=torch.tensor([d for ds in drafts for d in ds], dtype=torch.int32),
        num_draft_tokens=n,
        cu_num_draft_tokens=torch.tensor(np.cumsum(n), dtype=torch.int32),
        cu_num_sampled_tokens=torch.tensor(cu_sampled, dtype=torch.int32),
        target_logits_indices=torch.tensor(target_idx, dtype=torch.int32),
        bonus_logits_indices=torch.tensor(cu_sampled - 1, dtype=torch.int32),
        max_spec_len=max(n),
    )


def logits_rows(target: list[np.ndarray], drafts: list[list[int]], V: int) -> torch.Tensor:
    """[num_tokens + batch_size, V]: each request's target rows, then its bonus row (zeros)."""
    rows: list[np.ndarray] = []
    for t, d in zip(target, drafts, strict=True):
        rows.extend(t[: len(d)])
        rows.append(np.zeros(V))
    return torch.tensor(np.array(rows), dtype=torch.float32)


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in vllm importable; capture uninstalled before and after."""
    root = write_standin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    names = [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]
    for n in names:
        monkeypatch.delitem(sys.modules, n)
    vllm_v1._uninstall_for_tests()
    yield root
    vllm_v1._uninstall_for_tests()
    if vllm_v1._FINDER in sys.meta_path:
        sys.meta_path.remove(vllm_v1._FINDER)
    for n in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[n]


def read_rows(folder: Path) -> pl.DataFrame:
    return pl.read_parquet(sorted(folder.glob("part-*.parquet"))).sort(
        ["request_id", "round", "position"]
    )


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def measured_R(folder: Path) -> tuple[float, int]:
    res = api.validate(folder)
    pooled = next(c for c in res.cells if c.name == "pooled")
    (fig,) = pooled.arms.values()
    assert fig.label.value == "MEASURED"
    assert fig.R is not None
    return fig.R, fig.n_rounds


V = 6
T = 0.5
# draft_probs rows (vLLM: softmax(draft logits / T)); no ties inside a row
Q_A = np.array(
    [
        [0.05, 0.10, 0.50, 0.25, 0.07, 0.03],
        [0.40, 0.30, 0.12, 0.08, 0.06, 0.04],
        [0.45, 0.05, 0.30, 0.09, 0.01, 0.10],  # drafted 5: outside the top 2 (ids 0, 2)
    ]
)
Q_C = np.array(
    [
        [0.08, 0.44, 0.02, 0.06, 0.35, 0.05],
        [0.11, 0.15, 0.04, 0.03, 0.60, 0.07],
    ]
)
Q_H = np.array([[0.2, 0.3, 0.1, 0.15, 0.05, 0.2]])


def test_sampled_drafter_rows_equal_the_hand_computation(
    standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm.v1.sample.rejection_sampler as rs  # type: ignore[import-not-found]
    from vllm.v1.worker.gpu_model_runner import (  # type: ignore[import-not-found]
        GPUModelRunner,
        InputBatch,
    )

    folder = tmp_path / "cap"
    settings = vllm_v1.CaptureSettings(folder=str(folder), top_k=2, family="chat")
    cap = vllm_v1.install(settings)  # the modules are imported: wrapped at once
    assert getattr(rs.rejection_sample, "__specreplay_capture__", False)

    rng = np.random.default_rng(20261202)
    # batch rows: a (3 drafts, T), b (no drafts), h (greedy, 1 draft: another arm), c (2, T)
    drafts = [[2, 0, 5], [], [1], [1, 4]]
    req_ids = ["a", "b", "h", "c"]
    temps = [T, T, 0.0, T]
    computed = [17, 4, 9, 30]
    target = [
        rng.normal(size=(3, V)),
        np.zeros((0, V)),
        rng.normal(size=(1, V)),
        rng.normal(size=(2, V)),
    ]
    target[0][2, 5] = -4.0  # a, position 3: p/q < 1, rejected at u = 0.99
    target[3][0, 1] = -4.0  # c, position 1: rejected at u = 0.99
    uniforms = [0.0, 0.0, 0.99, 0.5, 0.99, 0.0]  # flattened like the drafts (a a a h c c)
    monkeypatch.setattr(rs, "UNIFORMS", uniforms)
    q_rows = np.vstack([Q_A, Q_H, Q_C])
    runner = GPUModelRunner(num_spec_tokens=3, method="draft_model")
    sm = SimpleNamespace(
        temperature=torch.tensor(temps, dtype=torch.float32), all_greedy=False, all_random=False
    )
    runner.input_batch = InputBatch(req_ids, computed, temps, sm)
    runner.draft_probs = torch.tensor(q_rows, dtype=torch.float32)

    out = runner._sample(logits_rows(target, drafts, V), metadata(drafts))
    # the sampler's own output is untouched: a accepts 2 then a recovered token, c none
    assert out[0, :2].tolist() == [2, 0] and int(out[0, 3]) == -1
    assert int(out[1, 1]) == -1 and int(out[3, 1]) == -1  # b: only its bonus token
    assert cap.counts.skipped_other_arm == 1  # h: greedy@3 is not t0.5@3
    counts = cap.close()
    assert cap.failed is None
    assert counts.rounds_recorded == 2

    rows = read_rows(folder)
    assert rows.get_column("logging_arm").unique().to_list() == ["t0.5@3"]
    assert rows.get_column("family").unique().to_list() == ["chat"]
    outside: list[float] = []
    for rid, q, tl, d, ctx, A in (
        ("a", Q_A, target[0], [2, 0, 5], 18, 2),
        ("c", Q_C, target[3], [1, 4], 31, 0),
    ):
        got = rows.filter(pl.col("request_id") == rid)
        n = len(d)
        assert got.get_column("round").to_list() == [0] * n
        assert got.get_column("position").to_list() == list(range(1, n + 1))
        assert got.get_column("context_tokens").to_list() == [ctx] * n
        assert got.get_column("drafted_id").to_list() == d
        assert got.get_column("accepted").to_list() == [p < A for p in range(n)]
        q32 = q.astype(np.float32).astype(np.float64)
        # candidates: the top 2 by q, then the drafted id if outside them, else the 3rd best
        order = np.argsort(-q32, axis=1, kind="stable")
        widen = any(d[p] not in order[p, :2] for p in range(n))
        cands = [
            [*order[p, :2], d[p] if d[p] not in order[p, :2] else order[p, 2]][: 3 if widen else 2]
            for p in range(n)
        ]
        assert got.get_column("cand_ids").to_list() == [[int(x) for x in c] for c in cands]
        for p, c in enumerate(cands):
            # the engine's float32 q at the candidates as they are, its rest in draft_tail
            # (schema v2: never renormalised)
            want_q = q32[p, c]
            np.testing.assert_allclose(got["emitted_q"][p].to_numpy(), want_q, rtol=1e-15)
            outside.append(1.0 - q32[p, c].sum())
            assert got["draft_tail"][p] == pytest.approx(outside[-1], abs=1e-15)
            want_lp = log_softmax(T * np.log(q32[p]))[c]  # the temperature-1 draft law
            np.testing.assert_allclose(got["draft_logprobs"][p].to_numpy(), want_lp, rtol=1e-12)
            # float32 softmax of logits / T as the sampler verified it: float32 rounding only
            want_p = softmax(tl[p].astype(np.float32).astype(np.float64) / T)[c]
            np.testing.assert_allclose(got["target_probs"][p].to_numpy(), want_p, rtol=2e-6)
            assert got["target_tail"][p] == pytest.approx(1.0 - want_p.sum(), abs=2e-6)
    assert [len(c) for c in rows.get_column("cand_ids").to_list()] == [3, 3, 3, 2, 2]
    # the mass outside the candidates: a's positions keep 0.85, 0.82, 0.85 of q; c's 0.79, 0.75
    assert outside == pytest.approx([0.15, 0.18, 0.15, 0.21, 0.25], abs=1e-6)
    assert cap.counts.positions_q == 5
    assert cap.counts.outside_mass_sum == pytest.approx(sum(outside), abs=1e-12)
    assert cap.counts.outside_mass_max == pytest.approx(0.25, abs=1e-6)

    R, n_rounds = measured_R(folder)
    assert n_rounds == 2 and pytest.approx(((2 + 1) + (0 + 1)) / 2, abs=1e-12) == R
    manifest = json.loads((folder / "CAPTURE.json").read_text())
    (writer,) = manifest["writers"]
    assert writer["writer"] == f"vllm_r0_p{os.getpid()}"
    assert writer["capture"]["drafter"] == "draft_model (vLLM draft_probs)"
    assert writer["capture"]["engine"] == "vllm 0.33.0+standin"


def test_point_mass_and_greedy_rows_equal_the_hand_computation(
    standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner, InputBatch

    folder = tmp_path / "cap"
    cap = vllm_v1.install(vllm_v1.CaptureSettings(folder=str(folder)))
    rng = np.random.default_rng(7)
    # g: greedy request; s: sampled at 0.8 (ngram drafts: a point mass); z: no drafts;
    # p: a padded draft (-1) after one real draft
    req_ids = ["g", "s", "z", "p"]
    temps = [0.0, 0.8, 0.8, 0.8]
    target = [rng.normal(size=(3, V)) for _ in req_ids]
    top_g = np.argmax(target[0], axis=1)
    drafts = [[int(top_g[0]), int((top_g[1] + 1) % V)], [4, 2, 0], [], [3, -1]]
    monkeypatch.setattr(rs, "UNIFORMS", [0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0])
    sm = SimpleNamespace(
        temperature=torch.tensor(temps, dtype=torch.float32), all_greedy=False, all_random=False
    )
    runner = GPUModelRunner(num_spec_tokens=3, method="ngram")
    runner.input_batch = InputBatch(req_ids, [10, 20, 30, 40], temps, sm)
    for _ in range(2):  # two steps: rounds 0 and 1 of the same requests
        runner._sample(logits_rows(target, drafts, V), metadata(drafts))
        runner.input_batch.num_computed_tokens_cpu += 3
    counts = cap.close()
    assert cap.failed is None and counts.rounds_recorded == 6

    rows = read_rows(folder)
    assert rows.get_column("logging_arm").unique().to_list() == ["greedy@3"]
    g = rows.filter(pl.col("request_id") == "g")
    # greedy: the verified law is the point mass at the target's argmax
    assert g.get_column("target_probs").to_list() == [[1.0], [0.0]] * 2
    assert g.get_column("accepted").to_list() == [True, False] * 2
    assert g.get_column("round").to_list() == [0, 0, 1, 1]
    assert g.get_column("context_tokens").to_list() == [11, 11, 14, 14]
    s = rows.filter(pl.col("request_id") == "s")
    want = [
        softmax(target[1][p].astype(np.float32).astype(np.float64) / 0.8)[d]
        for p, d in enumerate(drafts[1])
    ]
    for p in range(3):
        np.testing.assert_allclose(s["target_probs"][p].to_numpy(), [want[p]], rtol=2e-6)
    assert s.get_column("accepted").to_list()[:3] == [True] * 3
    p_rows = rows.filter(pl.col("request_id") == "p")  # cut at the padded draft
    assert p_rows.get_column("position").to_list() == [1, 1]
    assert p_rows.get_column("accepted").to_list() == [True, True]
    for col, val in (("cand_ids", None), ("emitted_q", [1.0]), ("draft_logprobs", [0.0])):
        for r, d in zip(rows.iter_rows(named=True), rows.get_column("drafted_id"), strict=True):
            assert r[col] == ([d] if val is None else val)
    assert "z" not in rows.get_column("request_id").to_list()

    R, n_rounds = measured_R(folder)
    # rounds: g (A=1) ×2, s (A=3) ×2, p (A=1) ×2
    assert n_rounds == 6 and pytest.approx((2 + 4 + 2) / 3, abs=1e-12) == R
    (writer,) = json.loads((folder / "CAPTURE.json").read_text())["writers"]
    assert writer["capture"]["drafter"] == "point-mass (ngram)"
    assert writer["capture"]["logging_arm"] == "greedy@3"


def test_an_adapter_error_never_reaches_the_engine(
    standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner, InputBatch

    cap = vllm_v1.install(vllm_v1.CaptureSettings(folder=str(tmp_path / "cap")))
    drafts = [[1, 2]]
    monkeypatch.setattr(rs, "UNIFORMS", [0.0, 0.0])
    sm = SimpleNamespace(temperature=torch.tensor([1.0]), all_greedy=False, all_random=True)
    runner = GPUModelRunner(num_spec_tokens=2, method="ngram")
    runner.input_batch = InputBatch(["x"], [5], [], sm)  # a runner missing its temperatures
    out = runner._sample(logits_rows([np.zeros((2, V))], drafts, V), metadata(drafts))
    assert out[0].tolist() == [1, 2, 0]  # the engine's output stands (bonus: argmax of zeros)
    assert cap.failed is not None and cap.failed.startswith("IndexError")
    assert cap.close() is None  # nothing was opened


SCRIPT = """
import multiprocessing, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["SPECREPLAY_CAPTURE"] = sys.argv[2]
os.environ["SPECREPLAY_CAPTURE_ARM"] = "greedy@2"
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
from specreplay.capture import vllm_v1
vllm_v1.register()  # as vLLM's load_general_plugins does, before the worker's imports
import numpy as np, torch
from types import SimpleNamespace
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.worker.gpu_model_runner import GPUModelRunner, InputBatch

def step(prefix):
    rs.UNIFORMS = [0.0] * 4
    drafts = [[1, 2], [3, 4]]
    sm = SimpleNamespace(temperature=torch.tensor([1.0, 1.0]), all_greedy=False, all_random=True)
    runner = GPUModelRunner(num_spec_tokens=2, method="ngram")
    runner.input_batch = InputBatch([prefix + "0", prefix + "1"], [5, 6], [1.0, 1.0], sm)
    n = [2, 2]
    md = SimpleNamespace(
        draft_token_ids=torch.tensor([1, 2, 3, 4], dtype=torch.int32), num_draft_tokens=n,
        cu_num_draft_tokens=torch.tensor([2, 4], dtype=torch.int32),
        target_logits_indices=torch.tensor([0, 1, 3, 4]), bonus_logits_indices=torch.tensor([2, 5]),
        max_spec_len=2)
    runner._sample(torch.zeros(6, 8), md)

if sys.argv[3] == "fork":
    # a vLLM worker started by fork (VLLM_WORKER_MULTIPROC_METHOD default) ends in os._exit:
    # only the atexit handlers multiprocessing runs before it can flush this writer
    child = multiprocessing.get_context("fork").Process(target=step, args=(sys.argv[4],))
    child.start(); child.join(); sys.exit(child.exitcode)
step(sys.argv[4])
"""


def test_two_processes_append_to_one_folder(standin: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cap"
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(standin), str(folder), how, prefix],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for how, prefix in (("exit", "A"), ("fork", "B"))
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    manifest = json.loads((folder / "CAPTURE.json").read_text())
    writers = manifest["writers"]
    assert len(writers) == 2
    assert all(w["writer"].startswith("vllm_r0_p") for w in writers)
    assert len({w["writer"] for w in writers}) == 2
    assert sorted(w["capture"]["counts"]["rounds_recorded"] for w in writers) == [2, 2]
    rows = read_rows(folder)
    assert sorted(rows.get_column("request_id").unique().to_list()) == ["A0", "A1", "B0", "B1"]
    R, n_rounds = measured_R(folder)
    assert n_rounds == 4 and pytest.approx(3.0) == R  # u = 0 and q = 1: every draft accepted


def _one_step(rs: Any, runner_cls: Any, batch_cls: Any, cap: vllm_v1.VllmCapture) -> None:
    """A batch of two requests: x (temperature 0: greedy@2) and y (temperature 1: t1@2)."""
    drafts = [[1, 2], [3, 4]]
    rs.UNIFORMS = [0.0] * 4
    sm = SimpleNamespace(temperature=torch.tensor([0.0, 1.0]), all_greedy=False, all_random=False)
    runner = runner_cls(num_spec_tokens=2, method="eagle")
    runner.input_batch = batch_cls(["x", "y"], [5, 6], [0.0, 1.0], sm)
    runner.draft_probs = torch.full((4, V), 1.0 / V)
    runner._sample(logits_rows([np.zeros((2, V))] * 2, drafts, V), metadata(drafts))


def test_only_tensor_parallel_rank_0_records(standin: Path, tmp_path: Path) -> None:
    import vllm.v1.sample.rejection_sampler as rs
    import vllm.v1.worker.gpu_model_runner as gmr

    cap = vllm_v1.VllmCapture(
        vllm_v1.CaptureSettings(folder=str(tmp_path / "cap")), tp_rank=lambda: 1
    )
    cap.patch_runner(gmr)
    cap.patch_sampler(rs)
    _one_step(rs, gmr.GPUModelRunner, gmr.InputBatch, cap)
    assert cap.recorder is None and cap.counts.batches == 0 and cap.failed is None
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize(("arm", "recorded"), [("greedy@2", "x"), ("t1@2", "y")])
def test_the_arm_variable_picks_the_requests_recorded(
    standin: Path, tmp_path: Path, arm: str, recorded: str
) -> None:
    import vllm.v1.sample.rejection_sampler as rs
    import vllm.v1.worker.gpu_model_runner as gmr

    folder = tmp_path / "cap"
    cap = vllm_v1.install(vllm_v1.CaptureSettings(folder=str(folder), logging_arm=arm))
    _one_step(rs, gmr.GPUModelRunner, gmr.InputBatch, cap)
    cap.close()
    rows = read_rows(folder)
    assert rows.get_column("request_id").unique().to_list() == [recorded]
    assert rows.get_column("logging_arm").unique().to_list() == [arm]
    assert cap.counts.skipped_other_arm == 1
    (writer,) = json.loads((folder / "CAPTURE.json").read_text())["writers"]
    want = "point-mass (eagle-argmax)" if arm == "greedy@2" else "eagle (vLLM draft_probs)"
    assert writer["capture"]["drafter"] == want
