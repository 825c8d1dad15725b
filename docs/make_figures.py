"""Draw the README's picture: a transformer trained on the copy task, and where it looks.

Run: .venv/bin/python docs/make_figures.py  (a few seconds on a CPU)
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402

from attention_course.data import CopyTask, seeded_generator  # noqa: E402
from attention_course.model import DecoderBlock, DecoderOnlyTransformer  # noqa: E402
from attention_course.training import TrainConfig, copy_task_loss, train  # noqa: E402
from attention_course.viz import plot_attention  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    task = CopyTask(seq_len=8, vocab_size=10)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len, block=DecoderBlock)
    train(model, task, copy_task_loss, TrainConfig(seed=0), progress=False)
    batch = task.batch(1, seeded_generator(7))
    _, attention = model.eval()(batch.inputs, return_attention=True)
    labels = [str(t) if t != task.separator else "|" for t in batch.inputs[0].tolist()]
    figure = plot_attention(attention[0][0], labels, labels,
                            title="copy task: each answer token looks back at its source")
    out = Path(__file__).parent / "copy_task_attention.png"
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
