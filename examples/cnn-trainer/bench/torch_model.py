"""A halox-train model file as a PyTorch network: the same layers with PyTorch's modules, and
the names of halox-train's parameters (as its checkpoints hold them) for PyTorch's tensors.

Used by bench-trainer.py (the speed reference) and by tests/trainer/check-torch.py (the oracle
for the trainer's steps). Dropout draws other masks in PyTorch than in halox-train.
"""


def parse_model(path):
    """The layers of a model file as (kind, fields) pairs, plus input and classes."""
    layers, inp, classes = [], None, None
    for raw in open(path):
        tok = raw.split("#")[0].split()
        if not tok:
            continue
        if tok[0] == "input":
            inp = [int(v) for v in tok[1:]]
        elif tok[0] == "classes":
            classes = int(tok[1])
        elif tok[0] in ("name", "dtype", "strategy"):
            continue
        else:
            layers.append((tok[0], dict(t.split("=", 1) for t in tok[1:])))
    return inp, classes, layers


class Net:
    """The network of a model file: `forward(x)`, `modules` (a torch.nn.ModuleList, one module
    per layer), `input` and `classes`, and `params` (halox-train's parameter names, such as
    "0.conv.weight" or "1.bn.gamma", to the PyTorch parameters and running statistics)."""

    def __init__(self, model_file, dtype=None):
        import torch
        import torch.nn as nn

        inp, classes, layers = parse_model(model_file)
        self.input, self.classes = inp, classes
        nd = len(inp) - 1
        conv = nn.Conv2d if nd == 2 else nn.Conv3d
        bn = nn.BatchNorm2d if nd == 2 else nn.BatchNorm3d
        maxp = nn.MaxPool2d if nd == 2 else nn.MaxPool3d
        avgp = nn.AvgPool2d if nd == 2 else nn.AvgPool3d

        def dims(v, default):  # "3" -> 3 (every dimension), "1x3x3" -> (1, 3, 3)
            if not v:
                return default
            vals = tuple(int(x) for x in v.split("x"))
            return vals[0] if len(vals) == 1 else vals

        mods, kinds, self.params = nn.ModuleList(), [], {}
        shape = torch.zeros(1, *inp)
        with torch.no_grad():
            for i, (kind, f) in enumerate(layers):
                pre = f"{i}.{kind}."
                if kind == "conv":
                    m = conv(shape.shape[1], int(f["out"]), dims(f.get("k"), 1),
                             dims(f.get("stride"), 1), dims(f.get("pad"), 0),
                             dims(f.get("dilation"), 1), bias=f.get("bias", "1") == "1")
                elif kind == "bn":
                    m = bn(shape.shape[1])
                    self.params.update({pre + "gamma": m.weight, pre + "beta": m.bias,
                                        pre + "running_mean": m.running_mean,
                                        pre + "running_var": m.running_var})
                elif kind == "relu":
                    m = nn.ReLU()
                elif kind == "lrn":
                    m = nn.LocalResponseNorm(int(f.get("size", 5)), float(f.get("alpha", 1e-4)),
                                             float(f.get("beta", 0.75)), float(f.get("k", 1.0)))
                elif kind in ("maxpool", "avgpool"):
                    k = dims(f.get("k"), 1)
                    s = dims(f.get("stride"), None) or k
                    m = (maxp if kind == "maxpool" else avgp)(k, s, dims(f.get("pad"), 0))
                elif kind == "dropout":
                    m = nn.Dropout(float(f.get("p", 0.5)))
                elif kind == "flatten":
                    m = nn.Flatten()
                elif kind == "fc":
                    m = nn.Linear(shape.shape[1], int(f["out"]), bias=f.get("bias", "1") == "1")
                else:  # add
                    m = nn.Identity()
                if kind in ("conv", "fc"):
                    self.params[pre + "weight"] = m.weight
                    if m.bias is not None:
                        self.params[pre + "bias"] = m.bias
                mods.append(m)
                kinds.append((kind, f.get("from"), f.get("label")))
                shape = m(shape) if kind != "add" else shape
        if dtype is not None:
            mods.to(dtype)
        self.modules, self._kinds = mods, kinds
        # halox-train decays the conv and fc weights only.
        self.decayed = [p for n, p in self.params.items() if n.endswith(".weight")]
        self.undecayed = [p for n, p in self.params.items()
                          if not n.endswith(".weight") and p.requires_grad]

    def forward(self, x):
        saved = {}
        for m, (kind, src, label) in zip(self.modules, self._kinds):
            x = x + saved[src] if kind == "add" else m(x)
            if label:
                saved[label] = x
        return x
