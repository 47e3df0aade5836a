"""piperec.torch.grow_embeddings: trained rows and optimizer state survive."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from piperec.torch import grow_embeddings  # noqa: E402


def train_steps(model, opt, idx, n=3):
    for _ in range(n):
        opt.zero_grad()
        out = model(idx)
        out.pow(2).sum().backward()
        opt.step()


@pytest.mark.parametrize("opt_name", ["adam", "adagrad", "sgd_momentum", "sparse_adam"])
@pytest.mark.parametrize("kind", ["embedding", "bag"])
def test_grow_keeps_rows_and_optimizer_state(kind, opt_name):
    torch.manual_seed(0)
    sparse = opt_name == "sparse_adam"
    t = (nn.Embedding(5, 4, sparse=sparse) if kind == "embedding"
         else nn.EmbeddingBag(5, 4, mode="sum", sparse=sparse))
    opt = {"adam": lambda p: torch.optim.Adam(p, lr=0.1),
           "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, initial_accumulator_value=0.5),
           "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
           "sparse_adam": lambda p: torch.optim.SparseAdam(list(p), lr=0.1)}[opt_name](t.parameters())
    idx = torch.tensor([[0], [3]])
    train_steps(t, opt, idx)
    before = t.weight.detach().clone()
    st_before = {k: v.clone() for k, v in opt.state[t.weight].items() if torch.is_tensor(v)}
    grown = grow_embeddings(t, 9, optimizer=opt)
    assert grown == [(0, 5, 9)]
    assert t.num_embeddings == 9 and t.weight.shape == (9, 4)
    assert torch.equal(t.weight[:5], before)                   # trained rows kept
    assert opt.param_groups[0]["params"][0] is t.weight       # optimizer follows
    st = opt.state[t.weight]
    for k, v in st_before.items():
        if v.dim() and v.shape[0] == 5:
            assert st[k].shape == (9, 4) and torch.equal(st[k][:5], v)
            fill = 0.5 if opt_name == "adagrad" else 0.0
            assert torch.all(st[k][5:] == fill)
        else:
            assert torch.equal(st[k], v)                        # e.g. Adam's step
    # Training continues, on the new rows too.
    train_steps(t, opt, torch.tensor([[7], [3]]), n=2)
    assert not torch.equal(t.weight[7], t.weight.new_zeros(4))
    assert torch.equal(t.weight[1], before[1])                 # untouched rows stay


def test_new_rows_use_module_init_or_given_init():
    torch.manual_seed(1)
    t = nn.Embedding(2, 8, padding_idx=0)
    grow_embeddings(t, 20000)
    new = t.weight[2:].detach()
    assert abs(float(new.mean())) < 0.05 and abs(float(new.std()) - 1.0) < 0.05  # N(0, 1)
    assert torch.all(t.weight[0] == 0) and t.padding_idx == 0
    grow_embeddings(t, 20010, init=lambda w: nn.init.constant_(w, 0.25))
    assert torch.all(t.weight[20000:] == 0.25)


def test_tables_lists_dicts_modules_and_headroom():
    tables = nn.ModuleList([nn.Embedding(3, 2), nn.EmbeddingBag(3, 2)])
    assert grow_embeddings(tables, [3, 4]) == [(1, 3, 4)]
    d = nn.ModuleDict({"C1": nn.Embedding(3, 2), "C2": nn.Embedding(3, 2)})
    assert grow_embeddings(d, {"C2": 10}, headroom=2.0) == [("C2", 3, 10)]
    assert grow_embeddings(d, [4, 11], headroom=2.0) == [("C1", 3, 6), ("C2", 10, 20)]

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Embedding(2, 2)
            self.mlp = nn.Linear(2, 2)
            self.b = nn.EmbeddingBag(2, 2)
    m = M()
    assert grow_embeddings(m, [5, 2]) == [(0, 2, 5)] and m.a.weight.shape == (5, 2)
    assert grow_embeddings(m, [1, 1]) == []   # never shrinks
    with pytest.raises(ValueError):
        grow_embeddings(m, [5])
    with pytest.raises(TypeError):
        grow_embeddings(3, [5])
