"""A Hugging Face ``transformers.Trainer`` run as its users write it: a small
GPT-2 built from its config (no download), a synthetic token dataset, and
``TrainingArguments`` with bf16 (``--fp32`` leaves it out).

On a GPU: ``python benchmarks/frameworks/hf_trainer_train.py``. Without one,
on a simulated H100: ``cutimeline record --device sim
benchmarks/frameworks/hf_trainer_train.py``.
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(Dataset):
    """Sequences of random token ids, each its own label (causal LM)."""

    def __init__(self, n: int, length: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fp32", action="store_true", help="train without bf16")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args(argv)

    config = GPT2Config(vocab_size=1024, n_positions=128, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config)
    data = RandomTokens(8 * args.steps, 128, config.vocab_size)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=8, max_steps=args.steps,
            learning_rate=3e-4, bf16=not args.fp32, report_to=[], save_strategy="no",
            logging_steps=2, dataloader_num_workers=0, disable_tqdm=True,
            use_cpu=not torch.cuda.is_available())
        trainer = Trainer(model=model, args=training, train_dataset=data)
        result = trainer.train()
    print(f"trained {result.global_step} steps on {training.device}, "
          f"loss {result.training_loss:.3f}")


if __name__ == "__main__":
    main()
