"""Verdict scenarios on code nobody here wrote: the model zoo's loops.

Hugging Face ``transformers``, ``timm``, ``torchvision`` and loops in the
structure of the ``pytorch/examples`` scripts (``zoo_hf.py``,
``zoo_vision.py``, ``zoo_examples.py``), each recorded on
``ctl.SimGPU("h100")``. Each expectation is what a performance engineer
would say of the loop on a real H100, derived from FLOPs, bytes and op
counts against the H100's figures (fp32 67 TFLOP/s without TF32; TF32
494 TFLOP/s, which cuDNN uses for convolutions by default; bf16 989
TFLOP/s; 3.35 TB/s; ≈ 2 µs per small kernel; eager PyTorch ≈ 5–10 µs of
host per launching op and ≈ 2–4 µs per view) and from the CPU cost of
the input pipelines measured here without the recorder (thread CPU
time; a training server has a free core per DataLoader worker). Op
counts per step are the aten ops the loop dispatches (counted from a
recording; they are the program's, not a verdict). Published step times,
where cited, are in ``zoo_calibration.md``. None of these expectations
is read from what cutimeline says today.

The libraries are the ``zoo`` benchmark extra: without them each scenario
raises ``Skip``. A set of ``sets.py``; the entries are in ``benchmarks/zoo/``.
"""

from __future__ import annotations

import contextlib
import io

from scenarios import scenario  # first: it puts benchmarks/zoo/ on the path

import zoo_examples  # noqa: E402
import zoo_hf  # noqa: E402
import zoo_vision  # noqa: E402

import cutimeline as ctl


def quiet(entry, seed: int, mode: str, **kw) -> ctl.Timeline:
    """Run a zoo entry with what its loop prints (log lines, progress)
    written to a buffer instead of the benchmark's table: the printing
    still costs what it costs."""
    with contextlib.redirect_stdout(io.StringIO()):
        return entry(seed, mode, **kw)


@scenario("GPU-bound", "GPT-2 124M, 8 × 1024 tokens, fp32: 7.2 TFLOP ≈ 107 ms at "
          "67 TFLOP/s vs ≈ 2,000 ops ≤ 20 ms of host")
def hf_gpt2_train(seed: int):
    """transformers' ``GPT2LMHeadModel`` (12 × 768, 50,257 words, tied
    head) trained on 8 × 1024 tokens with AdamW and a linear schedule, in
    ``run_clm_no_trainer.py``'s loop (the loss accumulated on the device,
    never read in the step). FLOPs: 6 · 85 M non-embedding parameters ·
    8,192 tokens = 4.2 T, the head 6 · 768 · 50,257 · 8,192 = 1.9 T,
    attention 12 · 3 · 4 · 8 · 1,024² · 768 = 0.93 T: 7.1 TFLOP, ≈ 107 ms
    at fp32's 67 TFLOP/s (matmuls do not use TF32 by default), more with
    LayerNorm, GELU and the 8,192 × 50,257 softmax (1.6 GB of logits).
    The host dispatches ≈ 2,000 ops per step (≈ 810 launching): ≤ 20 ms
    even at 10 µs each. The queue only grows: GPU-bound by ≥ 5×."""
    return quiet(zoo_hf.hf_gpt2_train, seed, "train")


@scenario("GPU-bound", "TinyLlama shape, 8 layers, bf16, 8 × 1024 tokens: 22 TFLOP ≈ 22 ms "
          "at 989 TFLOP/s + ≈ 45 ms of memory-bound ops vs ≈ 2,650 ops ≤ 27 ms")
def hf_llama_train(seed: int):
    """transformers' ``LlamaForCausalLM`` with TinyLlama-1.1B's shape
    (2,048 wide, 5,632 MLP, 32 heads over 4 KV heads, 32k words) cut to 8
    of its 22 layers, weights in bf16, 8 × 1024 tokens, AdamW. FLOPs:
    6 · (8 · 45 M + 65.5 M head) · 8,192 = 21 T plus attention 8 · 3 · 4 ·
    8 · 1,024² · 2,048 = 1.6 T: ≈ 22 TFLOP, 23 ms at bf16's 989 TFLOP/s
    (≈ 30 ms at a realistic 75 %).
    Memory-bound work is larger: RMSNorm upcasts to fp32 (8,192 × 2,048 ×
    4 B = 67 MB per pass), rotary, SiLU·mul over 8,192 × 5,632, residual
    adds: ≈ 40 passes of 30–90 MB per layer forward, × 3 with backward, ≈
    40 ms over 8 layers; the loss upcasts 8,192 × 32,000 logits to fp32
    (1 GB a pass, ≈ 6 passes) ≈ 4 ms; AdamW over 491 M bf16 parameters
    (7 × 2 B each) ≈ 2 ms: ≈ 75 ms of GPU work. The host dispatches ≈
    2,650 ops (≈ 1,270 launching), ≤ 27 ms at 10 µs each: GPU-bound by ≥ 2.5×."""
    return quiet(zoo_hf.hf_llama_train, seed, "train")


@scenario("GPU-bound", "BERT-base fine-tuning, 32 × 128: 2.2 TFLOP ≈ 32 ms at 67 TFLOP/s + "
          "≈ 8 ms of memory-bound ops vs ≈ 740 launches + 2,000 views ≈ 12 ms")
def hf_bert_finetune(seed: int):
    """transformers' ``BertForSequenceClassification`` (bert-base: 12 ×
    768, 110 M parameters), batch 32 × 128, AdamW + linear schedule, a
    tqdm bar, in ``run_glue_no_trainer.py``'s loop. FLOPs: 6 · 85 M
    encoder parameters · 4,096 tokens = 2.1 T + attention 12 · 3 · 4 · 32
    · 128² · 768 = 0.06 T: 2.2 TFLOP, 32 ms at 67 TFLOP/s (≈ 40 ms at
    80 % of it). Memory-bound passes: activations 4,096 × 768 × 4 B =
    12.6 MB, attention probabilities 32 × 12 × 128² × 4 B = 25 MB, ≈ 20
    passes per layer forward, × 3 with backward, ≈ 7 ms; AdamW over 110 M
    fp32 parameters (28 B each) ≈ 1 ms: ≈ 45 ms of GPU work. The host
    dispatches ≈ 2,740 ops per step, ≈ 740 of them launching (× 5–10 µs)
    and ≈ 2,000 views and reshapes (× 2–4 µs): ≈ 10–15 ms, and even at
    10 µs for every op 27 ms. The batch (32 padded rows of 4 small CPU
    tensors, collated in 0.6 ms) is a minor cost: GPU-bound by ≥ 3×."""
    return quiet(zoo_hf.hf_bert_finetune, seed, "train")


@scenario("GPU-bound", "BERT-base evaluation, 32 × 384 under no_grad: ≈ 42 ms of GPU work vs "
          "≈ 5–9 ms of host; one queue drain per batch for the metric's .cpu()")
def hf_bert_eval(seed: int):
    """``run_glue_no_trainer.py``'s evaluation of ``hf_bert_finetune``'s
    model at ``--max_length 384``: forward under ``torch.no_grad()``,
    argmax, predictions and labels copied to the host for the metric
    (``.cpu().numpy()``) every batch. Forward FLOPs 2 · 85 M · 12,288
    tokens = 2.09 T plus attention 12 · 4 · 384² · 768 · 32 = 0.17 T ≈ 34 ms
    at 67 TFLOP/s, with the memory-bound passes (the 32 × 12 × 384² scores)
    ≈ 42 ms of GPU work. The host dispatches ≈ 880 ops per batch (≈ 210
    launching, ≈ 670 views): ≈ 5–9 ms at 6–10 µs an op. The first read
    drains the queue; the GPU then waits while the host copies the labels,
    fetches and collates the next batch in the loop's own thread (≈ 330
    CPU-tensor ops: 2–3 ms on the 2-core VM, measured without the
    recorder) and dispatches up to the first 14.5 GFLOP matmul (≈ 20 ops,
    ≈ 0.3 ms; 216 µs of GPU, longer than the host's time per op, so the
    queue grows again from there): ≈ 2.5–3.5 ms idle per ≈ 45 ms batch, ≈
    93 % busy; below 85 % only with ≥ 7 ms idle: GPU-bound by ≥ 2×. (At
    128 tokens, 13 ms of GPU work against the same ≈ 3 ms, the loop sits
    on the 85 % line on a host this slow: its verdict depends on the CPU.)"""
    return quiet(zoo_hf.hf_bert_finetune, seed, "no_grad", seq=384)


@scenario("launch-bound", "GPT-2 124M generate(), batch 1, KV cache: ≈ 310 kernels of 2–4 µs "
          "(≈ 0.8 ms) vs ≈ 550 ops ≥ 2.8 ms of host per token; one stop read per token")
def hf_gpt2_generate(seed: int):
    """``model.generate(max_new_tokens=32, do_sample=False)`` on
    transformers' GPT-2 124M, batch 1, a 32-token prompt, one step per
    token (a logits processor marks it). Per token the forward over one
    position with the KV cache: matmuls of 1 × 768 by 768 × 2,304 and
    the like, each reading its weights once (7–9 MB, 2–3 µs at 3.35
    TB/s), the tied head 768 × 50,257 × 4 B = 154 MB (46 µs): ≈ 500 MB
    of weights, ≈ 150 µs of bandwidth, but ≈ 310 launches at the 2–3 µs
    floor, ≈ 0.8 ms of GPU work a token. The host dispatches ≈ 550 ops a
    token (≈ 40 per layer, plus the logits processing and stopping
    criteria), ≥ 2.8 ms at ≥ 5 µs each. The stop test
    ``bool(unfinished_sequences.max() == 0)`` syncs every token, but the
    host is ≥ 3× slower than the GPU, so it finds ≤ a few kernels queued
    (≤ 10 µs): the GPU waits for dispatch. CUDA graphs (a static cache
    and ``torch.compile``) are the fix: launch-bound. (On SimGPU today the
    stop test never reads true and ``generate()`` decodes past
    max_new_tokens; a guard stops it after 40 tokens with an error.)"""
    return quiet(zoo_hf.hf_gpt2_generate, seed, "no_grad", limit=40)


@scenario("launch-bound", "Llama 8 × 1024 serving loop, batch 4, KV cache: ≈ 370 launches ≈ "
          "0.9 ms of GPU vs ≈ 810 ops ≈ 3–5 ms of host per token; one .tolist() per token")
def hf_llama_serve(seed: int):
    """A serving loop around transformers' ``LlamaForCausalLM`` (8 layers
    1,024 wide, 16 heads over 4 KV heads, 32k words, fp32), batch 4,
    under ``torch.no_grad()``: prefill, then per token a forward of the
    last token over the KV cache, the argmax, ``.tolist()`` to hand the
    tokens on and test for the end token. GPU per token: weights 8 ·
    11.2 M + 32.8 M head = 123 M × 4 B = 490 MB, ≈ 150 µs of bandwidth,
    but ≈ 370 launches at ≥ 2 µs: ≈ 0.9 ms. Host: ≈ 810 ops a token (≈
    370 launching × 5–10 µs, ≈ 440 views × 2–4 µs): ≈ 3–5 ms. The read
    drains a queue of a few small kernels (≤ 20 µs): launch-bound by ≥ 3×."""
    return quiet(zoo_hf.hf_llama_serve, seed, "no_grad")


@scenario("input-bound", "timm ResNet-50, batch 128, num_workers=0: 340 ms of transforms "
          "per batch on the training thread vs ≤ 75 ms of GPU work")
def timm_resnet50_w0(seed: int):
    """timm ``train.py``'s epoch (``--no-prefetcher``: timm's own train
    transform on the CPU: RandomResizedCropAndInterpolation bicubic, flip,
    ColorJitter 0.4, ToTensor, Normalize) for ``resnet50``, batch 128,
    SGD (nesterov), label smoothing, ``DataLoader(num_workers=0)``.
    Making a batch costs 128 × 1.7 ms + the 77 MB collate: 340 ms of CPU
    measured here, all on the training thread. The step: 3.1 TFLOP
    (4.1 GMAC · 2 · 3 · 128), 6.3 ms at TF32's 494 TFLOP/s, 73 ms at
    the published 1,753 images/s of an H100 SXM (TF32); ≈ 470 launches
    of host dispatch and one ``loss.item()`` a step. The GPU idles ≥ 265
    of ≥ 340 ms: input-bound by ≥ 4× (workers are the fix)."""
    return quiet(zoo_vision.timm_resnet50_w0, seed, "train")


@scenario("GPU-bound", "timm ViT-B/16, batch 64, 4 workers: 6.8 TFLOP ≈ 101 ms at 67 TFLOP/s "
          "vs 150 ms of transforms per batch spread over 4 workers (≈ 37 ms)")
def timm_vit_b16_w4(seed: int):
    """timm ``train.py``'s epoch for ``vit_base_patch16_224``, batch 64,
    AdamW, ``DataLoader(num_workers=4)`` over timm's train transform.
    FLOPs: 35.2 GFLOP per image forward × 3 × 64 = 6.8 TFLOP, 101 ms at
    fp32's 67 TFLOP/s (timm leaves TF32 off for matmuls), plus LayerNorm,
    GELU and softmax passes. A batch costs 150 ms of CPU (64 × 1.8 ms +
    collate); 4 workers on 4 cores deliver one per ≈ 37 ms, ahead of the
    ≥ 101 ms step. The host dispatches ≈ 460 launches (≈ 1,600 ops) per
    step, ≤ 10 ms, and reads ``loss.item()`` once: GPU-bound by ≥ 2.5×.
    (On this 2-core VM the 4 workers share 2 cores with the training
    thread: ≈ 75 ms a batch, still ahead.)"""
    return quiet(zoo_vision.timm_vit_b16_w4, seed, "train")


@scenario("host-bound", "64 images augmented per sample with transforms.v2 on CPU tensors in "
          "the loop: ≈ 90 ms of CPU ops (≈ 6,000) vs ≈ 37 ms of ResNet-50 GPU work")
def tv_resnet50_cpu_aug(seed: int):
    """torchvision ``resnet50``, batch 64, SGD; no DataLoader: each step
    augments 64 uint8 CPU images one by one with ``transforms.v2``
    (RandomResizedCrop, flip, ColorJitter, ToDtype, Normalize: 1.3 ms of
    CPU each measured here, ≈ 90 CPU-tensor ops per image), stacks them
    (38 MB) and copies the batch to the device: ≈ 90 ms of host compute
    in ≈ 6,000 ops that launch nothing. The model: 1.55 TFLOP per step,
    3.1 ms at TF32's peak, ≈ 37 ms at the published 1,753 images/s (H100
    SXM, TF32). The GPU idles ≥ 53 ms a step while the host computes on
    the CPU: host-bound by ≥ 2.4× (moving the augmentation to workers or
    the GPU is the fix; CUDA graphs would not help)."""
    return quiet(zoo_vision.tv_resnet50_cpu_aug, seed, "train")


@scenario("input-bound", "mnist/main.py, 1 worker: 6.5 ms of CPU per batch of 64 vs ≈ 0.9 ms "
          "of host dispatch and ≈ 0.2 ms of GPU work per step")
def ex_mnist(seed: int):
    """pytorch/examples ``mnist/main.py``'s ``train()`` with its CUDA
    loader settings (batch 64, ``num_workers=1``, ``pin_memory=True``):
    each item is made a PIL image and passed through ToTensor + Normalize;
    a batch costs 6.5 ms of CPU measured here (the issue measured 11.4 ms
    on the real dataset). The step: conv2 2 · 64 · 24² · 64 · 288 = 1.4
    GFLOP and fc1 0.15 GFLOP forward, ≈ 4.6 GFLOP with backward, µs at
    any precision: ≈ 48 kernels at the 2–3 µs floor (≈ 0.15 ms); ≈ 93
    ops of host (≈ 0.5–0.9 ms). The one worker delivers a batch every
    ≥ 6.5 ms: the loop waits in the fetch ≥ 85 % of the time: input-bound
    by ≥ 7×."""
    return quiet(zoo_examples.ex_mnist, seed, "train")


@scenario("input-bound", "dcgan/main.py, 2 workers over FakeData 64²: 32 ms of CPU per batch "
          "(≈ 16 ms with 2 workers) vs ≈ 3–5 ms per iteration of D and G updates")
def ex_dcgan(seed: int):
    """pytorch/examples ``dcgan/main.py`` (``--dataset fake``: FakeData
    64² with ToTensor, 2 workers, batch 64): per iteration D on real,
    G, D on the fake twice, G's update, five ``.item()`` reads and the
    print. A batch costs 32 ms of CPU measured here (random image, PIL
    conversion, ToTensor), one per ≈ 16 ms from 2 workers. The
    iteration: D forward ≈ 13.3 GFLOP (four 4.3 GFLOP convolutions), G
    ≈ 13.4 GFLOP; three D passes and one G pass with their backwards ≈
    160 GFLOP ≈ 0.35 ms at TF32, with BatchNorm/LeakyReLU passes over
    ≤ 16 MB activations ≈ 1 ms of GPU work; ≈ 440 ops of host dispatch
    (≈ 215 launching) ≈ 2–4 ms, and the five reads each drain a short
    queue. The loop waits ≈ 11–13 ms of each ≈ 16 ms for the next batch:
    input-bound by ≥ 3×."""
    return quiet(zoo_examples.ex_dcgan, seed, "train")
