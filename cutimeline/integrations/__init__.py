"""Where users already look: a recording logged to Weights & Biases
(``wandb.log``) or TensorBoard (``tensorboard.log``, ``trace_handler``),
and recorded from Lightning (``lightning.CutimelineProfiler``, for
``Trainer(profiler=...)``) or the Hugging Face Trainer
(``transformers.CutimelineCallback``).

Each module imports its package only when used; without it, one
``CutimelineError`` says what to install (``pip install
'cutimeline[wandb]'``, ``[tensorboard]``, ``[frameworks]``).
``logged.py`` holds what they all log, ``training.py`` the recording of
a trainer's steps that the two trainers share.
"""
