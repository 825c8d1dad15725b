"""Lesson 05's model in the tests: built with the lesson's block, and trained as the notebook
trains it."""

import functools

import torch
from torch import nn

from attention_course.data import CopyTask
from attention_course.model import DecoderBlock, DecoderOnlyTransformer
from attention_course.training import TrainConfig, copy_task_loss, train


def lesson_model(task: CopyTask | None = None, **kwargs) -> DecoderOnlyTransformer:
    task = task or CopyTask()
    return DecoderOnlyTransformer(task.n_tokens, task.context_len, block=DecoderBlock, **kwargs)


def trained(task: CopyTask, config: TrainConfig) -> nn.Module:
    torch.manual_seed(0)
    model = lesson_model(task)
    train(model, task, copy_task_loss, config, progress=False)
    return model


@functools.cache
def fully_trained(reverse: bool) -> nn.Module:
    """Lesson 05's model trained as the notebook trains it (once per test process)."""
    return trained(CopyTask(seq_len=10, vocab_size=10, reverse=reverse), TrainConfig(seed=0))
