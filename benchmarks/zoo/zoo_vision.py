"""Zoo entries from ``timm`` and ``torchvision``: CNNs and a ViT built
without weights on ``meta`` tensors, fed by their libraries' own
transforms on CPU images.

The timm loops follow ``train.py``'s ``train_one_epoch`` and ``validate``
as run with ``--no-prefetcher`` (the batch made on the CPU by the
transforms ``create_transform`` builds from the model's data config,
then copied to the device; with the prefetcher timm moves Normalize to
the GPU instead): timm's optimizer factory, label-smoothing loss, cosine
schedule stepped per update, ``losses_m.update(loss.item(), n)`` every
step, the f-string log line every ``log_interval`` updates; validation
reads loss, top-1 and top-5 with ``.item()`` each batch. The torchvision
loops apply ``torchvision.transforms`` to synthetic images, in a
DataLoader or in the loop itself. Per-image transform costs measured here
(thread CPU time, 320 × 256 noise images, no JPEG decode): timm's train
transform 1.7 ms, its eval transform 1.5 ms, torchvision's classic
RandomResizedCrop + flip + ColorJitter + ToTensor + Normalize on PIL
1.5 ms, the same as ``transforms.v2`` on uint8 tensors 1.3 ms.
"""

from __future__ import annotations

import time

import torch
from zoo import META, ImageSet, grad_mode, loader, on_device, recording, require, zoo

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def timm_loop(seed: int, mode: str, arch: str, *, batch: int, workers: int, steps: int,
              opt: str, lr: float, channels_last: bool = False) -> object:
    """timm ``train.py``'s epoch (train) or ``validate`` (no_grad /
    inference) over ``steps`` batches of synthetic images."""
    require("timm", "torchvision")
    import timm
    from timm.data import create_transform, resolve_model_data_config
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import CosineLRScheduler
    from timm.utils import AverageMeter, accuracy
    torch.manual_seed(0)
    with META:
        model = timm.create_model(arch, num_classes=1000)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    cfg = resolve_model_data_config(model)
    train = mode == "train"
    data = loader(ImageSet(steps * batch, create_transform(**cfg, is_training=train)),
                  batch, workers, drop_last=True)
    log_interval = 2  # train.py's default is 50; 2 here so that a 5-step run logs
    losses_m, top1_m, top5_m = AverageMeter(), AverageMeter(), AverageMeter()
    with recording(seed) as rec:
        if train:
            optimizer = create_optimizer_v2(model, opt, lr=lr, weight_decay=1e-4,
                                            **({"momentum": 0.9} if opt == "sgd" else {}))
            sched = CosineLRScheduler(optimizer, t_initial=steps)
            loss_fn = LabelSmoothingCrossEntropy(smoothing=0.1)
            model.train()
            start = time.time()
            for idx, (x, y) in enumerate(data):
                x, y = on_device(x, y)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                losses_m.update(loss.item(), x.size(0))
                optimizer.zero_grad()
                if idx % log_interval == 0:
                    lr_now = optimizer.param_groups[0]["lr"]
                    dt = time.time() - start
                    print(f"Train: 0 [{idx:>4d}/{steps}]  Loss: {losses_m.val:#.3g} "
                          f"({losses_m.avg:#.3g})  Time: {dt:.3f}s  LR: {lr_now:.3e}")
                sched.step_update(num_updates=idx + 1, metric=losses_m.avg)
                rec.step()
        else:
            loss_fn = torch.nn.CrossEntropyLoss()
            model.eval()
            with grad_mode(mode):
                for idx, (x, y) in enumerate(data):
                    x, y = on_device(x, y)
                    if channels_last:
                        x = x.contiguous(memory_format=torch.channels_last)
                    output = model(x)
                    loss = loss_fn(output, y)
                    acc1, acc5 = accuracy(output, y, topk=(1, 5))
                    losses_m.update(loss.data.item(), x.size(0))
                    top1_m.update(acc1.item(), output.size(0))
                    top5_m.update(acc5.item(), output.size(0))
                    if idx % log_interval == 0:
                        print(f"Test: [{idx:>4d}/{steps}]  Loss: {losses_m.val:>7.3f} "
                              f"({losses_m.avg:>6.3f})  Acc@1: {top1_m.val:>7.3f} "
                              f"({top1_m.avg:>7.3f})  Acc@5: {top5_m.val:>7.3f}")
                    rec.step()
    return rec.timeline


@zoo("timm resnet50, batch 128 × 224², SGD (nesterov), timm train transforms in a "
     "DataLoader with num_workers=0", needs=("timm", "torchvision"))
def timm_resnet50_w0(seed: int, mode: str):
    return timm_loop(seed, mode, "resnet50", batch=128, workers=0, steps=5, opt="sgd",
                     lr=0.1)


@zoo("timm resnet50 channels_last, batch 128 × 224², SGD (nesterov), timm train "
     "transforms in a DataLoader with num_workers=4", needs=("timm", "torchvision"))
def timm_resnet50_w4(seed: int, mode: str):
    return timm_loop(seed, mode, "resnet50", batch=128, workers=4, steps=6, opt="sgd",
                     lr=0.1, channels_last=True)


@zoo("timm vit_base_patch16_224, batch 64, AdamW, timm train transforms in a "
     "DataLoader with num_workers=0", needs=("timm", "torchvision"))
def timm_vit_b16_w0(seed: int, mode: str):
    return timm_loop(seed, mode, "vit_base_patch16_224", batch=64, workers=0, steps=5,
                     opt="adamw", lr=1e-3)


@zoo("timm vit_base_patch16_224, batch 64, AdamW, timm train transforms in a "
     "DataLoader with num_workers=4", needs=("timm", "torchvision"))
def timm_vit_b16_w4(seed: int, mode: str):
    return timm_loop(seed, mode, "vit_base_patch16_224", batch=64, workers=4, steps=6,
                     opt="adamw", lr=1e-3)


def tv_classic(train: bool):
    """torchvision's ImageNet recipe on PIL images (references/classification)."""
    from torchvision import transforms as T
    norm = T.Normalize(MEAN, STD)
    if train:
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                          T.ColorJitter(0.4, 0.4, 0.4), T.ToTensor(), norm])
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])


def classify(model, opt, loss_fn, x, y, mode: str) -> int:
    """One step of torchvision's classification recipe: forward and loss in
    ``mode``'s grad mode, then SGD's update (train) or the count of correct
    predictions read back (evaluation, returned)."""
    with grad_mode(mode):
        out = model(x)
        loss = loss_fn(out, y)
    if mode == "train":
        opt.zero_grad()
        loss.backward()
        opt.step()
        return 0
    return (out.argmax(1) == y).sum().item()


def tv_loader_loop(seed: int, mode: str, *, workers: int, batch: int = 128,
                   steps: int = 5) -> object:
    """torchvision resnet18 fed a DataLoader over PIL images through the
    classic transforms; training with SGD, or evaluation reading the
    correct count per batch."""
    require("torchvision")
    import torchvision
    torch.manual_seed(0)
    with META:
        model = torchvision.models.resnet18()
    train = mode == "train"
    data = loader(ImageSet(steps * batch, tv_classic(train)), batch, workers,
                  drop_last=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    correct = 0
    with recording(seed) as rec:
        model.train(train)
        for x, y in data:
            correct += classify(model, opt, loss_fn, *on_device(x, y), mode)
            rec.step()
    return rec.timeline


@zoo("torchvision resnet18, batch 128, SGD, classic transforms on PIL in a DataLoader "
     "with num_workers=0", needs=("torchvision",))
def tv_resnet18_w0(seed: int, mode: str):
    return tv_loader_loop(seed, mode, workers=0)


@zoo("torchvision resnet18, batch 128, SGD, classic transforms on PIL in a DataLoader "
     "with num_workers=4", needs=("torchvision",))
def tv_resnet18_w4(seed: int, mode: str):
    return tv_loader_loop(seed, mode, workers=4, steps=6)


@zoo("torchvision resnet50, batch 64, SGD, transforms.v2 (RandomResizedCrop, "
     "ColorJitter, ToDtype, Normalize) per sample on uint8 CPU tensors in the loop",
     needs=("torchvision",))
def tv_resnet50_cpu_aug(seed: int, mode: str):
    """No DataLoader: each step takes 64 decoded uint8 images (CPU
    tensors, 3 × 256 × 320), augments them one by one with
    ``torchvision.transforms.v2`` (≈ 1.3 ms of CPU each, a few dozen
    small CPU-tensor ops), stacks them and copies the batch to the
    device; evaluation uses Resize + CenterCrop."""
    require("torchvision")
    import torchvision
    from torchvision.transforms import v2
    torch.manual_seed(0)
    with META:
        model = torchvision.models.resnet50()
    train = mode == "train"
    if train:
        aug = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                          v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True),
                          v2.Normalize(MEAN, STD)])
    else:
        aug = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    g = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 256, 320), dtype=torch.uint8, generator=g)
              for _ in range(8)]
    labels = torch.randint(0, 1000, (64,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    correct = 0
    with recording(seed) as rec:
        model.train(train)
        for _ in range(4):
            x = torch.stack([aug(images[i % len(images)]) for i in range(64)])
            correct += classify(model, opt, loss_fn, *on_device(x, labels), mode)
            rec.step()
    return rec.timeline
