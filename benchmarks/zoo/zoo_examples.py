"""Zoo entries in the structure of the ``pytorch/examples`` training scripts.

The scripts cannot be downloaded here and their code is not copied: each
loop is written anew following its script's published structure (the
model's layers, what the loop calls and in which order, what it prints
and reads back, the DataLoader settings of its CUDA path), on synthetic
data in a shrunk dataset, with ``rec.step()`` added once per iteration.
Each docstring names the script and what was shrunk.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from zoo import META, grad_mode, loader, on_device, recording, require, zoo

# -- mnist/main.py -------------------------------------------------------------


class MnistNet(nn.Module):
    """mnist/main.py's ``Net``: two 3 × 3 convolutions (32, 64 channels),
    2 × 2 max-pool, dropout 0.25, Linear 9216 → 128, dropout 0.5, Linear
    128 → 10, log-softmax."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


class MnistLike(Dataset):
    """torchvision's MNIST dataset without the download: uint8 28 × 28
    digits held as one tensor, each item made a PIL image
    (``Image.fromarray(img.numpy(), mode="L")``) and passed through the
    transform, as ``datasets.MNIST.__getitem__`` does."""

    def __init__(self, n: int, transform):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        from PIL import Image
        img = Image.fromarray(self.data[i].numpy(), mode="L")
        return self.transform(img), int(self.targets[i])


@zoo("pytorch/examples mnist/main.py: Net, Adadelta + StepLR, batch 64, one DataLoader "
     "worker, loss.item() printed every log_interval", needs=("torchvision",))
def ex_mnist(seed: int, mode: str):
    """mnist/main.py as run with ``--cuda``-style kwargs: train loader of
    batch 64 with ``num_workers=1, pin_memory=True, shuffle=True``, test
    loader of batch 1000; ``ToTensor`` + ``Normalize((0.1307,), (0.3081,))``;
    Adadelta(lr=1.0), StepLR(step_size=1, gamma=0.7) stepped after the
    epoch. ``train()``: to(device), zero_grad, forward, ``nll_loss``,
    backward, step, and every ``log_interval`` (10) batches the 'Train
    Epoch' line with ``loss.item()``. ``test()`` (no_grad / inference
    modes; the script uses ``torch.no_grad()``): summed ``nll_loss``
    ``.item()`` and the correct count ``.item()`` per batch, the 'Test
    set' line at the end. Shrunk: 12 training batches (768 images), 3
    test batches."""
    require("torchvision")
    from torchvision import transforms
    torch.manual_seed(0)
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    model = MnistNet().to(META)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    log_interval, epoch = 10, 1
    with recording(seed) as rec:
        if mode == "train":
            data = loader(MnistLike(12 * 64, tf), 64, 1, pin_memory=True)
            model.train()
            for batch_idx, (x, y) in enumerate(data):
                x, y = x.to(META), y.to(META)
                opt.zero_grad()
                loss = F.nll_loss(model(x), y)
                loss.backward()
                opt.step()
                if batch_idx % log_interval == 0:
                    print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                        epoch, batch_idx * len(x), len(data.dataset),
                        100.0 * batch_idx / len(data), loss.item()))
                rec.step()
            sched.step()
        else:
            data = loader(MnistLike(3 * 1000, tf), 1000, 1, pin_memory=True)
            model.eval()
            test_loss, correct = 0.0, 0
            with grad_mode(mode):
                for x, y in data:
                    x, y = x.to(META), y.to(META)
                    out = model(x)
                    test_loss += F.nll_loss(out, y, reduction="sum").item()
                    pred = out.argmax(dim=1, keepdim=True)
                    correct += pred.eq(y.view_as(pred)).sum().item()
                    rec.step()
            n = len(data.dataset)
            print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
                test_loss / n, correct, n, 100.0 * correct / n))
    return rec.timeline


# -- imagenet/main.py ----------------------------------------------------------


class Summary(Enum):
    NONE, AVERAGE, SUM, COUNT = range(4)


class AverageMeter:
    """imagenet/main.py's meter: ``val``, ``sum``, ``count``, ``avg`` of what
    ``update(val, n)`` is given (tensors stay tensors: ``top1.update(acc1[0],
    n)``), printed through its format string ``fmt``."""

    def __init__(self, name: str, fmt: str = ":f", summary_type=Summary.AVERAGE):
        self.name, self.fmt, self.summary_type = name, fmt, summary_type
        self.val = self.avg = self.sum = 0
        self.count = 0

    def update(self, val, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self) -> str:
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)

    def summary(self) -> str:
        fmt = {Summary.NONE: "", Summary.AVERAGE: "{name} {avg:.3f}",
               Summary.SUM: "{name} {sum:.3f}", Summary.COUNT: "{name} {count:.3f}"}
        return fmt[self.summary_type].format(**self.__dict__)


class ProgressMeter:
    """imagenet/main.py's progress line: '[ i/n]' and every meter, tab-joined."""

    def __init__(self, num_batches: int, meters: list, prefix: str = ""):
        fmt = "{:" + str(len(str(num_batches))) + "d}"
        self.batch_fmtstr = "[" + fmt + "/" + fmt.format(num_batches) + "]"
        self.meters, self.prefix = meters, prefix

    def display(self, batch: int) -> None:
        print("\t".join([self.prefix + self.batch_fmtstr.format(batch)]
                        + [str(m) for m in self.meters]))

    def display_summary(self) -> None:
        print(" ".join([" *"] + [m.summary() for m in self.meters]))


def topk_accuracy(output: torch.Tensor, target: torch.Tensor, topk=(1,)) -> list:
    """imagenet/main.py's ``accuracy()``: under no_grad, the top-k
    predictions against the target, each k's hit count scaled to percent
    (a 1-element tensor per k)."""
    with torch.no_grad():
        maxk, batch = max(topk), target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        hit = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [hit[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch)
                for k in topk]


@zoo("pytorch/examples imagenet/main.py --dummy: resnet18, batch 256, SGD, 4 workers "
     "over FakeData, AverageMeter/ProgressMeter printing '{:6.2f}' of tensors",
     needs=("torchvision",))
def ex_imagenet(seed: int, mode: str):
    """imagenet/main.py with its defaults (``-a resnet18 -b 256 -j 4
    --lr 0.1 --momentum 0.9 --wd 1e-4 -p 10``) and ``--dummy``: the
    dataset is ``FakeData(n, (3, 224, 224), 1000, ToTensor())``; the loader
    shuffles with ``pin_memory=True``. ``train()``: data time, ``.to(device,
    non_blocking=True)``, forward, ``CrossEntropyLoss``, ``accuracy(topk=(1,
    5))``, ``losses.update(loss.item())``, ``top1.update(acc1[0])``,
    ``top5.update(acc5[0])``, zero_grad, backward, step, batch time, and
    ``progress.display(i + 1)`` every ``print_freq`` batches, from the
    first. ``validate()`` (no_grad / inference modes): the same reads
    under ``torch.no_grad()`` and ``display_summary()`` at the end.
    Shrunk: 4 batches."""
    require("torchvision")
    import torchvision
    from torchvision import transforms
    torch.manual_seed(0)
    steps, batch, print_freq = 4, 256, 10
    with META:
        model = torchvision.models.resnet18()
    criterion = nn.CrossEntropyLoss().to(META)
    opt = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    data = loader(torchvision.datasets.FakeData(steps * batch, (3, 224, 224), 1000,
                                                transforms.ToTensor()),
                  batch, 4, pin_memory=True)
    batch_time, data_time = AverageMeter("Time", ":6.3f"), AverageMeter("Data", ":6.3f")
    losses = AverageMeter("Loss", ":.4e")
    top1, top5 = AverageMeter("Acc@1", ":6.2f"), AverageMeter("Acc@5", ":6.2f")
    with recording(seed) as rec:
        if mode == "train":
            progress = ProgressMeter(len(data), [batch_time, data_time, losses, top1, top5],
                                     prefix="Epoch: [0]")
            model.train()
            end = time.time()
            for i, (images, target) in enumerate(data):
                data_time.update(time.time() - end)
                images, target = on_device(images, target)
                output = model(images)
                loss = criterion(output, target)
                acc1, acc5 = topk_accuracy(output, target, topk=(1, 5))
                losses.update(loss.item(), images.size(0))
                top1.update(acc1[0], images.size(0))
                top5.update(acc5[0], images.size(0))
                opt.zero_grad()
                loss.backward()
                opt.step()
                batch_time.update(time.time() - end)
                end = time.time()
                if i % print_freq == 0:
                    progress.display(i + 1)
                rec.step()
            sched.step()
        else:
            progress = ProgressMeter(len(data), [batch_time, losses, top1, top5],
                                     prefix="Test: ")
            model.eval()
            with grad_mode(mode):
                end = time.time()
                for i, (images, target) in enumerate(data):
                    images, target = on_device(images, target)
                    output = model(images)
                    loss = criterion(output, target)
                    acc1, acc5 = topk_accuracy(output, target, topk=(1, 5))
                    losses.update(loss.item(), images.size(0))
                    top1.update(acc1[0], images.size(0))
                    top5.update(acc5[0], images.size(0))
                    batch_time.update(time.time() - end)
                    end = time.time()
                    if i % print_freq == 0:
                        progress.display(i + 1)
                    rec.step()
            progress.display_summary()
    return rec.timeline


# -- word_language_model/main.py -----------------------------------------------


class RNNModel(nn.Module):
    """word_language_model/model.py's ``RNNModel`` for ``--model LSTM``:
    dropout, embedding, ``nn.LSTM(ninp, nhid, nlayers, dropout=dropout)``,
    dropout, Linear decoder, log-softmax over the words."""

    def __init__(self, ntoken: int, ninp: int = 200, nhid: int = 200, nlayers: int = 2,
                 dropout: float = 0.2):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        decoded = self.decoder(self.drop(out)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid),
                w.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """Cut the hidden state from the graph of the batches before it."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


@zoo("pytorch/examples word_language_model/main.py: 2-layer LSTM 200 wide, batch 20, "
     "bptt 35, repackage_hidden, clip_grad_norm_, manual SGD, loss.item() per batch")
def ex_word_lm(seed: int, mode: str):
    """word_language_model/main.py with its defaults (``--model LSTM
    --emsize 200 --nhid 200 --nlayers 2 --lr 20 --clip 0.25 --batch_size
    20 --bptt 35 --dropout 0.2``) on a Wikitext-2-sized vocabulary (33,278
    words): ``batchify`` puts the token stream on the device as 20
    columns; ``train()``: per batch ``get_batch`` slices, ``model.zero_grad()``,
    ``repackage_hidden``, forward, ``NLLLoss``, backward,
    ``clip_grad_norm_(0.25)``, ``p.data.add_(p.grad, alpha=-lr)`` for every
    parameter, ``total_loss += loss.item()``, and the '| epoch ...' line
    with ``math.exp`` of the mean loss every ``log_interval`` batches.
    ``evaluate()`` (no_grad / inference): batch 10, ``len(data) *
    criterion(...).item()`` per batch. Shrunk: 6 batches of the train
    stream (log_interval 200 → 2, so that a 6-batch run logs)."""
    torch.manual_seed(0)
    ntokens, bsz, bptt, lr, clip, log_interval = 33278, 20, 35, 20.0, 0.25, 2
    model = RNNModel(ntokens).to(META)
    criterion = nn.NLLLoss()
    g = torch.Generator().manual_seed(0)

    def batchify(data: torch.Tensor, n: int) -> torch.Tensor:
        data = data.narrow(0, 0, data.size(0) // n * n)
        return data.view(n, -1).t().contiguous().to(META)

    def get_batch(source: torch.Tensor, i: int):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)

    with recording(seed) as rec:
        if mode == "train":
            train_data = batchify(torch.randint(0, ntokens, (bsz * (6 * bptt + 1),),
                                                generator=g), bsz)
            model.train()
            total_loss, start = 0.0, time.time()
            hidden = model.init_hidden(bsz)
            for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
                x, targets = get_batch(train_data, i)
                model.zero_grad()
                hidden = repackage_hidden(hidden)
                output, hidden = model(x, hidden)
                loss = criterion(output, targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
                total_loss += loss.item()
                if batch % log_interval == 0 and batch > 0:
                    cur_loss, elapsed = total_loss / log_interval, time.time() - start
                    print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch "
                          "{:5.2f} | loss {:5.2f} | ppl {:8.2f}".format(
                              1, batch, len(train_data) // bptt, lr,
                              elapsed * 1000 / log_interval, cur_loss, math.exp(cur_loss)))
                    total_loss, start = 0.0, time.time()
                rec.step()
        else:
            val_data = batchify(torch.randint(0, ntokens, (10 * (6 * bptt + 1),),
                                              generator=g), 10)
            model.eval()
            total_loss = 0.0
            hidden = model.init_hidden(10)
            with grad_mode(mode):
                for i in range(0, val_data.size(0) - 1, bptt):
                    x, targets = get_batch(val_data, i)
                    output, hidden = model(x, hidden)
                    hidden = repackage_hidden(hidden)
                    total_loss += len(x) * criterion(output, targets).item()
                    rec.step()
            val_loss = total_loss / (len(val_data) - 1)
            print("| end of epoch | valid loss {:5.2f} | valid ppl {:8.2f}".format(
                val_loss, math.exp(val_loss)))
    return rec.timeline


# -- dcgan/main.py ---------------------------------------------------------------

NZ, NGF, NDF, NC = 100, 64, 64, 3


def dcgan_generator() -> nn.Module:
    """dcgan/main.py's Generator: transposed convolutions 100 → 512 (4²) →
    256 (8²) → 128 (16²) → 64 (32²) → 3 (64²), BatchNorm + ReLU between,
    Tanh at the end."""
    layers, ch = [], [NZ, NGF * 8, NGF * 4, NGF * 2, NGF]
    for i, (a, b) in enumerate(zip(ch, ch[1:])):
        layers += [nn.ConvTranspose2d(a, b, 4, 1 if i == 0 else 2, 0 if i == 0 else 1,
                                      bias=False), nn.BatchNorm2d(b), nn.ReLU(True)]
    layers += [nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


class DcganD(nn.Module):
    """dcgan/main.py's Discriminator: strided convolutions 3 → 64 → 128 →
    256 → 512, BatchNorm (after the first) + LeakyReLU(0.2), a 4 × 4
    convolution to one logit, Sigmoid, flattened to one value per image."""

    def __init__(self):
        super().__init__()
        ch = [NC, NDF, NDF * 2, NDF * 4, NDF * 8]
        layers = []
        for i, (a, b) in enumerate(zip(ch, ch[1:])):
            layers.append(nn.Conv2d(a, b, 4, 2, 1, bias=False))
            if i:
                layers.append(nn.BatchNorm2d(b))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
        layers += [nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid()]
        self.main = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m: nn.Module) -> None:
    """dcgan/main.py's init: N(0, 0.02) convolutions, N(1, 0.02) BatchNorm scales."""
    name = type(m).__name__
    if "Conv" in name:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in name:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


@zoo("pytorch/examples dcgan/main.py --dataset fake: 64² DCGAN, two Adam optimizers, "
     "batch 64, 2 workers, 3 .item() reads + 2 in the print per iteration, save_image",
     needs=("torchvision",))
def ex_dcgan(seed: int, mode: str):
    """dcgan/main.py with its defaults (``--batchSize 64 --imageSize 64
    --nz 100 --ngf 64 --ndf 64 --lr 0.0002 --beta1 0.5 --workers 2``) and
    ``--dataset fake`` (``FakeData(image_size=(3, 64, 64),
    transform=ToTensor())``). Per iteration: (1) D on the real batch,
    ``BCELoss`` against a ``torch.full`` label, backward, ``D_x =
    output.mean().item()``; noise, G, ``label.fill_``, D on
    ``fake.detach()``, backward, ``D_G_z1`` read; ``optimizerD.step()``;
    (2) G's loss through D, backward, ``D_G_z2`` read,
    ``optimizerG.step()``; the '[e/n][i/n] Loss_D ...' line with
    ``errD.item()`` and ``errG.item()``; at ``i % 100 == 0``
    ``vutils.save_image`` of the real batch and of G(fixed_noise). The
    no_grad / inference modes sample instead: G(noise), D's mean score
    read and printed, the first batch saved. Shrunk: 16 batches (1,024
    images; FakeData's default is 1,000). Fewer would record mostly the
    start: the first iteration (workers forked, first batches, first
    calls) is long, and the two workers fill DataLoader's prefetch queue
    meanwhile (up to 2 × 2 batches), which the next steps drain before the
    loop settles at the workers' pace."""
    require("torchvision")
    import torchvision
    import torchvision.utils as vutils
    from torchvision import transforms
    torch.manual_seed(0)
    netG, netD = dcgan_generator().to(META), DcganD().to(META)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(64, NZ, 1, 1, device=META)
    outf = tempfile.mkdtemp(prefix="zoo-dcgan-")
    with recording(seed) as rec:
        if mode == "train":
            data = loader(torchvision.datasets.FakeData(16 * 64, (3, 64, 64),
                                                        transform=transforms.ToTensor()),
                          64, 2)
            optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
            optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
            for i, batch in enumerate(data):
                netD.zero_grad()
                real = batch[0].to(META)
                n = real.size(0)
                label = torch.full((n,), 1.0, dtype=real.dtype, device=META)
                output = netD(real)
                errD_real = criterion(output, label)
                errD_real.backward()
                D_x = output.mean().item()
                fake = netG(torch.randn(n, NZ, 1, 1, device=META))
                label.fill_(0.0)
                output = netD(fake.detach())
                errD_fake = criterion(output, label)
                errD_fake.backward()
                D_G_z1 = output.mean().item()
                errD = errD_real + errD_fake
                optD.step()
                netG.zero_grad()
                label.fill_(1.0)
                output = netD(fake)
                errG = criterion(output, label)
                errG.backward()
                D_G_z2 = output.mean().item()
                optG.step()
                print("[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f"
                      % (0, 1, i, len(data), errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
                if i % 100 == 0:
                    vutils.save_image(real, os.path.join(outf, "real_samples.png"),
                                      normalize=True)
                    fake = netG(fixed_noise)
                    vutils.save_image(fake.detach(), os.path.join(
                        outf, "fake_samples_epoch_000.png"), normalize=True)
                rec.step()
        else:
            netG.eval()
            netD.eval()
            with grad_mode(mode):
                for i in range(4):
                    fake = netG(torch.randn(64, NZ, 1, 1, device=META))
                    score = netD(fake).mean().item()
                    print(f"[{i}] D(G(z)): {score:.4f}")
                    if i == 0:
                        vutils.save_image(fake, os.path.join(outf, "samples.png"),
                                          normalize=True)
                    rec.step()
    return rec.timeline

