"""Child process of bench-memory.py: trains a model file's network in PyTorch for a few steps and
prints, as JSON, the growth of the resident memory's high-water mark since before the network
was made (the same measure halox-train's --log-json reports as memory_peak_bytes)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    import torch
    import torch.nn as nn
    from torch_model import Net

    model, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with open("/proc/self/clear_refs", "w") as f:  # the peak from here on, not the import's
        f.write("5")
    base = status("VmRSS")
    net = Net(model)
    opt = torch.optim.SGD(net.modules.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *net.input)
    y = torch.randint(0, net.classes, (batch,))
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net.forward(x), y).backward()
        opt.step()
    # The input batch is made here, as halox-train's loader fills its input buffer in training.
    print(json.dumps({"peak_bytes": status("VmHWM") - base}))


if __name__ == "__main__":
    main()
