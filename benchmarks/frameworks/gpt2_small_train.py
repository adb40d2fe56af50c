"""GPT-2 small (124M, transformers' ``GPT2LMHeadModel(GPT2Config())``) trained
as a plain PyTorch loop written for a GPU: 8 × 1024 random tokens, bf16
autocast, AdamW, five steps, the loss read each step.

On a GPU: ``python benchmarks/frameworks/gpt2_small_train.py``. Without one:
``cutimeline record --device sim --skip 1 --steps 3
benchmarks/frameworks/gpt2_small_train.py`` (what a simulated step costs, and
where its time goes: ``benchmarks/RESULTS.md``).
"""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
ids = torch.randint(0, 50257, (8, 1024))
t0 = time.perf_counter()
for step in range(5):
    x = ids.to(device, non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item():.3f}, {time.perf_counter() - t0:.2f} s so far",
          flush=True)
