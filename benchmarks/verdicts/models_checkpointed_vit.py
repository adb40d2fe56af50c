"""The models of ``loop_kinds.py``: an MLP of activation-checkpointed
blocks and a ViT (encoder blocks with ``scaled_dot_product_attention``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from models import Block


class CkptMLP(nn.Module):
    """``depth`` residual blocks (Linear 4096→4096, GELU), each recomputed
    in backward (``torch.utils.checkpoint``, its non-reentrant form)."""

    def __init__(self, width: int = 4096, depth: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU())
                                    for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = x + checkpoint(b, x, use_reentrant=False)
        return self.head(x)


class ViT(nn.Module):
    """A ViT: 16 × 16 patches by a strided convolution, a class token,
    learned positions, ``Block``s without the causal mask (attention by
    ``F.scaled_dot_product_attention``), a linear head."""

    def __init__(self, d: int = 384, depth: int = 6, heads: int = 6, img: int = 224,
                 patch: int = 16, classes: int = 1000):
        super().__init__()
        n = (img // patch) ** 2
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d))
        self.blocks = nn.ModuleList(EncoderBlock(d, heads) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x[:, 0]))


class EncoderBlock(Block):
    """``Block`` with bidirectional attention (an encoder's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))
