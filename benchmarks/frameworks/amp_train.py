"""Plain PyTorch mixed precision as its users write it: ``torch.autocast("cuda",
dtype=torch.bfloat16)`` around the forward pass, a ``GradScaler``, a pinned
DataLoader and CUDA events timing each step.

On a GPU: ``python benchmarks/frameworks/amp_train.py``. Without one, on a
simulated H100: ``cutimeline record --device sim
benchmarks/frameworks/amp_train.py``; the linear layers' matmuls then run
(and are priced) in bf16.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print("device", device, torch.cuda.get_device_name(0) if device == "cuda" else "")
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device)
    data = TensorDataset(torch.randn(2048, 1024), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=256, pin_memory=device == "cuda")
    timed = device == "cuda"
    if timed:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for epoch in range(2):
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if timed:
                start.record()
            with torch.autocast(device, dtype=torch.bfloat16):
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if timed:
                end.record()
                torch.cuda.synchronize()
            if i % 4 == 0:
                ms = f" {start.elapsed_time(end):.3f} ms" if timed else ""
                print(f"epoch {epoch} step {i} loss {loss.item():.3f}{ms} ({out.dtype})")


if __name__ == "__main__":
    main()
