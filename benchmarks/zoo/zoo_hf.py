"""Zoo entries from Hugging Face ``transformers``: models built from configs
(no weights) on ``meta`` tensors, in the loops of the library's own
example scripts.

The training loops follow ``examples/pytorch/language-modeling/
run_clm_no_trainer.py`` and ``text-classification/run_glue_no_trainer.py``
(forward with labels, backward, ``optimizer.step()``,
``lr_scheduler.step()``, ``optimizer.zero_grad()``; their evaluation
loops gather the loss or the predictions and read them back at the end),
with Accelerate's device placement written out as ``.to(device)``.
Decoding is ``model.generate()`` itself, and the serving loop a
hand-written one over the KV cache that reads each next token with
``.tolist()``. transformers is imported inside each entry: it is a
benchmark extra.
"""

from __future__ import annotations

import io
import math

import torch
from torch.utils.data import Dataset
from zoo import META, grad_mode, loader, recording, require, zoo

GPT2_124M = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
# TinyLlama-1.1B's shape (2048 wide, 5632 MLP, 32 heads over 4 KV heads, 32k
# words) cut to 8 of its 22 layers: per-layer FLOP, byte and op ratios stay.
TINYLLAMA_8L = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                    num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                    max_position_embeddings=2048)
# A small Llama for decoding: 8 layers 1024 wide, 16 heads over 4 KV heads.
LLAMA_SMALL = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                   num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                   max_position_embeddings=2048)


class TokenBlocks(Dataset):
    """Pre-tokenized blocks as ``run_clm``'s ``group_texts`` leaves them:
    ``input_ids`` of ``seq`` tokens and ``labels`` equal to them."""

    def __init__(self, n: int, seq: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class GlueLike(Dataset):
    """A tokenized sentence-pair task padded to ``seq`` (``run_glue``'s
    ``padding="max_length"``): ids, token types, attention mask, label."""

    def __init__(self, n: int, seq: int, vocab: int = 30522, labels: int = 2):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.lengths = torch.randint(seq // 2, seq + 1, (n,), generator=g)
        self.labels = torch.randint(0, labels, (n,), generator=g)
        self.seq = seq

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        pos = torch.arange(self.seq)
        return {"input_ids": self.ids[i],
                "token_type_ids": (pos >= self.lengths[i] // 2).long(),
                "attention_mask": (pos < self.lengths[i]).long(),
                "labels": self.labels[i]}


def to_device(batch: dict) -> dict:
    """What Accelerate's ``prepare``d loader does to each batch."""
    return {k: v.to(META, non_blocking=True) for k, v in batch.items()}


def clm_loop(seed: int, mode: str, model, *, steps: int, batch: int, seq: int,
             vocab: int, lr: float) -> object:
    """``run_clm_no_trainer.py``'s loop: training (AdamW with weight decay
    off for biases and norms, a linear schedule, the loss accumulated with
    ``loss.detach().float()`` and never read in the step), or its
    evaluation (each batch's loss repeated per sample and gathered, their
    mean read once at the end for ``math.exp``)."""
    from transformers import default_data_collator, get_scheduler
    data = loader(TokenBlocks(steps * batch, seq, vocab), batch, 0,
                  collate_fn=default_data_collator)
    no_decay = ("bias", "norm")
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(k in n.lower() for k in no_decay)], "weight_decay": 0.1},
        {"params": [p for n, p in model.named_parameters()
                    if any(k in n.lower() for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    sched = get_scheduler("linear", optimizer=opt, num_warmup_steps=0,
                          num_training_steps=steps)
    with recording(seed) as rec:
        if mode == "train":
            model.train()
            total_loss = 0
            for b in data:
                loss = model(**to_device(b)).loss
                total_loss += loss.detach().float()
                loss.backward()
                opt.step()
                sched.step()
                opt.zero_grad()
                rec.step()
        else:
            model.eval()
            losses = []
            for b in data:
                with grad_mode(mode):
                    loss = model(**to_device(b)).loss
                losses.append(loss.repeat(batch))
                rec.step()
            eval_loss = torch.mean(torch.cat(losses))
            try:
                perplexity = math.exp(eval_loss)
            except OverflowError:
                perplexity = float("inf")
            print(f"perplexity: {perplexity}")
    return rec.timeline


@zoo("transformers GPT2LMHeadModel, 124M config, batch 8 × 1024, AdamW + linear "
     "schedule (run_clm_no_trainer.py loop)", needs=("transformers",))
def hf_gpt2_train(seed: int, mode: str):
    require("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    with META:
        model = GPT2LMHeadModel(GPT2Config(**GPT2_124M))
    return clm_loop(seed, mode, model, steps=4, batch=8, seq=1024, vocab=50257, lr=6e-4)


@zoo("transformers LlamaForCausalLM, TinyLlama-1.1B shape cut to 8 layers, bf16 "
     "weights, batch 8 × 1024, AdamW (run_clm_no_trainer.py loop)", needs=("transformers",))
def hf_llama_train(seed: int, mode: str):
    require("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    with META:
        model = LlamaForCausalLM(LlamaConfig(**TINYLLAMA_8L)).to(torch.bfloat16)
    return clm_loop(seed, mode, model, steps=4, batch=8, seq=1024, vocab=32000, lr=3e-4)


@zoo("transformers BertForSequenceClassification, bert-base config, batch 32 × 128, "
     "AdamW + linear schedule (run_glue_no_trainer.py loop)", needs=("transformers",))
def hf_bert_finetune(seed: int, mode: str, seq: int = 128):
    """``run_glue_no_trainer.py``: training with a tqdm bar updated each
    step; evaluation takes the argmax of the logits and hands predictions
    and labels to the metric, which copies them to the host (``evaluate``'s
    ``add_batch`` turns tensors into NumPy arrays). ``seq``: the padded
    length (``--max_length``)."""
    require("transformers")
    from tqdm.auto import tqdm
    from transformers import BertConfig, BertForSequenceClassification, get_scheduler
    torch.manual_seed(0)
    steps, batch = 5, 32
    with META:
        model = BertForSequenceClassification(BertConfig(num_labels=2))
    data = loader(GlueLike(steps * batch, seq), batch, 0)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(k in n for k in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters()
                    if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=2e-5)
    sched = get_scheduler("linear", optimizer=opt, num_warmup_steps=0,
                          num_training_steps=steps)
    bar = tqdm(range(steps), file=io.StringIO())  # drawn as on a console, kept quiet
    with recording(seed) as rec:
        if mode == "train":
            model.train()
            for b in data:
                loss = model(**to_device(b)).loss
                loss.backward()
                opt.step()
                sched.step()
                opt.zero_grad()
                bar.update(1)
                rec.step()
        else:
            model.eval()
            preds, refs = [], []
            for b in data:
                b = to_device(b)
                with grad_mode(mode):
                    logits = model(**b).logits
                preds.append(logits.argmax(dim=-1).cpu().numpy())
                refs.append(b["labels"].cpu().numpy())
                rec.step()
            acc = sum((p == r).sum() for p, r in zip(preds, refs)) / (steps * batch)
            print(f"accuracy: {acc:.3f}")
    return rec.timeline


class TokenSteps:
    """A logits processor that marks a step per generated token (it
    changes no scores and dispatches no op) and, with ``limit``, stops a
    ``generate()`` that decodes past it with an error instead of
    decoding for ever."""

    def __init__(self, rec, limit: int | None = None):
        self.rec, self.limit, self.calls = rec, limit, 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        self.rec.step()
        if self.limit is not None and self.calls > self.limit:
            raise RuntimeError(
                f"generate() decoded {self.limit} tokens without stopping, past "
                f"max_new_tokens: its stop test bool(unfinished_sequences.max() == 0) "
                f"never read True")
        return scores


def generate_steps(seed: int, mode: str, model, *, batch: int, prompt: int, new: int,
                   vocab: int, limit: int | None) -> object:
    """``model.generate()`` greedy, ``new`` tokens after a ``prompt``-token
    prompt, batch ``batch``, one step per token; ``mode`` is the grad mode
    around the call (``generate`` itself runs under ``no_grad``)."""
    from transformers import LogitsProcessorList
    torch.manual_seed(0)
    model.eval()
    ids = torch.randint(0, vocab, (batch, prompt))
    with recording(seed) as rec:
        marks = TokenSteps(rec, limit)
        with grad_mode(mode):
            x = ids.to(META)
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                                 do_sample=False, pad_token_id=0,
                                 logits_processor=LogitsProcessorList([marks]))
        print(f"generated {out.shape[1] - prompt} tokens")
    return rec.timeline


@zoo("transformers GPT2LMHeadModel 124M generate(), greedy, batch 1, 32-token prompt, "
     "max_new_tokens=32", needs=("transformers",))
def hf_gpt2_generate(seed: int, mode: str, limit: int | None = None):
    require("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    with META:
        model = GPT2LMHeadModel(GPT2Config(**GPT2_124M))
    return generate_steps(seed, mode, model, batch=1, prompt=32, new=32, vocab=50257,
                          limit=limit)


@zoo("transformers LlamaForCausalLM (8 × 1024) generate(), greedy, batch 4, "
     "max_new_tokens=32", needs=("transformers",))
def hf_llama_generate(seed: int, mode: str, limit: int | None = None):
    require("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    with META:
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_SMALL))
    return generate_steps(seed, mode, model, batch=4, prompt=32, new=32, vocab=32000,
                          limit=limit)


@zoo("transformers LlamaForCausalLM (8 × 1024) serving loop over the KV cache, "
     "batch 4, 32 tokens, each read with .tolist()", needs=("transformers",))
def hf_llama_serve(seed: int, mode: str):
    """A serving loop as people write one around a causal LM: prefill the
    prompt, then per token one forward over the last token with the KV
    cache, the argmax, ``.tolist()`` to hand the tokens to the detokenizer
    and test for the end token, the next input built from them."""
    require("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    with META:
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_SMALL)).eval()
    eos, batch, prompt = 2, 4, 32
    ids = torch.randint(3, 32000, (batch, prompt))
    with recording(seed) as rec:
        with grad_mode(mode):
            out = model(input_ids=ids.to(META), use_cache=True)
            past, texts, done = out.past_key_values, [[] for _ in range(batch)], [False] * batch
            for _ in range(32):
                nxt = out.logits[:, -1, :].argmax(dim=-1)
                for i, t in enumerate(nxt.tolist()):
                    texts[i].append(t)
                    done[i] = done[i] or t == eos
                rec.step()
                if all(done):
                    break
                out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
                past = out.past_key_values
        print(f"served {sum(map(len, texts))} tokens")
    return rec.timeline
