"""CUDA graphs of training steps (reccbm/graphs.py): the bookkeeping around a graph on the CPU (the capture replaced by
the function it records), and on a GPU, where there is one, the graphs themselves against the steps they replace."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch
from torch import nn

from reccbm import StageIIConfig, TextEncoder, graphs, load_tokenizer, train_grader
from reccbm.graphs import WARMUP, EncoderGraphs, KDimSteps, padded_length
from tests.support.tiny_models import encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _problem(device: torch.device, n: int = 45) -> tuple[nn.Linear, Any, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, y = torch.randn(n, 5, device=device), torch.randint(0, 3, (n,), device=device)
    model = nn.Linear(5, 3).to(device)

    def loss_of(idx: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(model(x[idx]), y[idx])

    return model, loss_of, x, y


def _train(graph: bool, device: torch.device, epochs: int = 3,
           bs: int = 4) -> tuple[list[torch.Tensor], list[float], KDimSteps]:
    model, loss_of, x, _ = _problem(device)
    steps = KDimSteps(loss_of, list(model.parameters()), 0.05, bs, len(x), epochs, 0.1, device, graph)
    gen = torch.Generator().manual_seed(0)
    totals = [steps.epoch(torch.randperm(len(x), generator=gen)) for _ in range(epochs)]
    return [p.detach().cpu() for p in model.parameters()], totals, steps


def test_replayed_k_dim_steps_compute_what_the_steps_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph path's bookkeeping (warm-up steps, one capture, the rate of each step read from the schedule, the
    batch's indices from a buffer, a shorter last batch step by step, the loss summed per epoch) gives the step-by-step
    path's parameters and losses: here the "capture" returns the step itself, so every replay runs it on the CPU."""
    captured: list[Any] = []

    def fake_capture(fn: Any, pool: Any = None) -> Any:
        captured.append(fn)
        return fn

    monkeypatch.setattr(graphs, "capture", fake_capture)
    cpu = torch.device("cpu")
    eager, eager_totals, _ = _train(False, cpu)
    replayed, replayed_totals, steps = _train(True, cpu)
    assert len(captured) == 1 and steps.failed is None
    assert steps.step == 3 * 12 and steps.warm == WARMUP  # 45 items in batches of 4: 11 full + 1 short, 3 epochs
    for a, b in zip(eager, replayed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert replayed_totals == pytest.approx(eager_totals, rel=1e-5)


def test_a_failed_capture_goes_on_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fn: Any, pool: Any = None) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "capture", broken)
    cpu = torch.device("cpu")
    eager, _, _ = _train(False, cpu)
    replayed, _, steps = _train(True, cpu)
    assert steps.failed is not None and "not permitted" in steps.failed and steps.replay is None
    for a, b in zip(eager, replayed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_padded_lengths() -> None:
    assert [padded_length(t, 32, 128) for t in (1, 32, 33, 100, 128)] == [32, 32, 64, 128, 128]
    assert padded_length(130, 32, 128) == 130  # past the backbone's positions: as it is
    assert padded_length(7, 1, None) == 7


def _still(backbone: str) -> TextEncoder:
    """The tiny backbone without dropout: a padded and an unpadded pass must then agree."""
    enc = TextEncoder.from_pretrained(backbone)
    cfg = copy.deepcopy(enc.hf_config)
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
    still = TextEncoder.from_config(cfg)
    still.load_state_dict(enc.state_dict())
    return still.train()


def _pass(enc: TextEncoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    enc.zero_grad(set_to_none=True)
    H = enc(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    # a fixed random direction of the real tokens' states (‖H‖² would be nearly constant under the LayerNorm on top)
    R = torch.randn(H.shape, generator=torch.Generator().manual_seed(1)).to(H.device)
    (H * R * batch["attention_mask"].unsqueeze(-1)).sum().backward()
    return H.detach().clone(), [p.grad.detach().clone() for p in enc.parameters() if p.grad is not None]


def test_encoder_graphs_pad_the_length_and_give_the_states_and_gradients_back(backbone: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch padded to the next multiple of graph_pad_to gives, at its own length, the states and the gradients of
    the unpadded pass (the padding is masked); one graph per (batch size, padded length, token types). The graph
    itself is replaced by the module it records (no CUDA here)."""
    recorded: list[tuple[int, int]] = []

    def fake_make_graphed(module: nn.Module, args: tuple[torch.Tensor, ...], **kw: Any) -> nn.Module:
        recorded.append(tuple(args[0].shape))  # type: ignore[arg-type]
        return module

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", fake_make_graphed)
    enc = _still(backbone)
    tok = load_tokenizer(backbone)
    items = encoded(tok, toy_table(6, seed=3))
    from reccbm.inference import collate

    batch = collate(items, list(range(6)), tok.pad_token_id)
    T = batch["input_ids"].shape[1]
    H0, g0 = _pass(enc, batch)
    g = EncoderGraphs(enc.module, pad_to=T + 5, max_positions=None)
    H1 = g(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    assert H1.shape == H0.shape
    enc.graphs = g
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))  # TextEncoder uses graphs on a GPU
    H2, g2 = _pass(enc, batch)
    monkeypatch.undo()
    torch.testing.assert_close(H2, H0, rtol=1e-5, atol=1e-5)
    assert len(g2) == len(g0) > 0
    for a, b in zip(g0, g2):  # the same sums in another order: relative to each gradient's size
        assert float((a - b).norm()) <= 1e-4 * float(a.norm()) + 1e-8
    assert recorded == [(6, T + 5)] and g.captures == 1  # the second pass replayed the first shape's graph


# ---------------------------------------------------------------------------- on a GPU
@gpu
def test_on_a_gpu_replayed_k_dim_steps_match_the_steps() -> None:
    cuda = torch.device("cuda")
    eager, eager_totals, _ = _train(False, cuda)
    replayed, replayed_totals, steps = _train(True, cuda)
    assert steps.failed is None and steps.replay is not None
    for a, b in zip(eager, replayed):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert replayed_totals == pytest.approx(eager_totals, rel=1e-4)


@gpu
def test_on_a_gpu_stage2_as_graphs_matches_stage2_on_the_cpu(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(40, seed=1)), encoded(tok, toy_table(12, seed=2))
    g = torch.Generator().manual_seed(0)
    p_tr = torch.softmax(torch.randn(len(train), 3, 3, generator=g), -1)
    p_dev = torch.softmax(torch.randn(len(dev), 3, 3, generator=g), -1)
    cfg = StageIIConfig(epochs=4, intervention_p=0.0)
    results = {}
    for device in ("cpu", "cuda"):
        m = copy.deepcopy(model)
        r = train_grader(m, p_tr, torch.as_tensor(train.concepts), torch.as_tensor(train.grades), p_dev,
                         torch.as_tensor(dev.grades), dataclasses.replace(cfg, device="graph"), device=device)
        results[device] = (r, [p.detach().cpu() for p in m.stage2_parameters()])
    for a, b in zip(results["cpu"][1], results["cuda"][1]):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@gpu
def test_on_a_gpu_encoder_graphs_match_the_eager_encoder(backbone: str) -> None:
    enc = _still(backbone).cuda()
    tok = load_tokenizer(backbone)
    from reccbm.inference import collate

    items = encoded(tok, toy_table(8, seed=3))
    batch = {k: v.cuda() for k, v in collate(items, list(range(8)), tok.pad_token_id).items()}
    H0, g0 = _pass(enc, batch)
    enc.graphs = EncoderGraphs(enc.module, pad_to=32, max_positions=512)
    for _ in range(3):  # capture, then replays
        H1, g1 = _pass(enc, batch)
        torch.testing.assert_close(H1, H0, rtol=1e-4, atol=1e-4)
        for a, b in zip(g0, g1):
            assert float((a - b).norm()) <= 1e-3 * float(a.norm()) + 1e-7
    assert enc.graphs.captures == 1 and not enc.graphs.failed


def test_the_forms_a_gpu_computes_without_waiting_equal_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU, L_rank's mean over the concepts with pairs and LCEC's posterior mean skip the questions that would wait
    for the GPU (which concepts have pairs, whether any level is observed): the same values as the CPU's forms."""
    from reccbm.lcec import LatentCorrection
    from reccbm.model import opcc_loss

    g = torch.Generator().manual_seed(0)
    lcec = LatentCorrection(4, 1e-3)
    with torch.no_grad():
        lcec.L.copy_(torch.eye(4) + 0.3 * torch.randn(4, 4, generator=g))
        lcec.eta.copy_(torch.randn(4, generator=g))
        lcec.mu0.copy_(torch.rand(4, generator=g))
    s = torch.rand(6, 4, generator=g)
    c_hat, c = 2 * torch.rand(6, 4, generator=g), torch.randint(0, 3, (6, 4), generator=g)
    c[:, 1] = 1  # a concept without pairs
    none, some = torch.zeros(6, 4, dtype=torch.bool), torch.rand(6, 4, generator=g) < 0.4
    cpu = [lcec(s, none), lcec(s, some), opcc_loss(c_hat, c), opcc_loss(c_hat, torch.ones_like(c))]
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    gpu = [lcec(s, none), lcec(s, some), opcc_loss(c_hat, c), opcc_loss(c_hat, torch.ones_like(c))]
    monkeypatch.undo()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert float(cpu[3]) == 0.0 and float(cpu[2]) > 0
