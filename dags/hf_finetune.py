"""
# hf_finetune: a Hugging Face Trainer retrained daily through Zeus

A text classifier trained with the `transformers` `Trainer`, every day on that day's
synthetic reviews ("the plot was really good ..."): short sentences of neutral words with
one sentiment word somewhere in them, labelled positive or negative. The model is a tiny BERT
(2 layers, hidden size 32) **built from a config**, and the tokenizer a word-level one built
in memory, so nothing is downloaded; with a checkpoint of your own, load it with
`from_pretrained` instead and the rest is the same.

Zeus comes in through one object, `ZeusTrainerCallback(run, args, metric="accuracy")`,
built before the `Trainer`: it sets the per-device batch size from the global one Zeus chose
(`per_device_train_batch_size = batch size / gradient_accumulation_steps / devices`),
profiles the power limits over the first steps, and stops the Trainer at the target or the
early-stop bound (docs/frameworks.md).

The machine has no GPU, so the run uses a **simulated** GPU (`device="simulated:v100"`): the
steps are real, power and slowdown follow the V100's measured curve; every figure is labelled
simulated. Needs `pip install 'zeus-airflow[huggingface,examples]'`.

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags HF_HUB_OFFLINE=1
airflow db migrate
airflow dags test hf_finetune 2025-01-01
zeus-airflow runs --job hf_finetune.train
```
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

import pendulum
from airflow.sdk import DAG

from zeus_airflow import TrainingRun, ZeusTrainOperator

POSITIVE = ("good", "great", "fine", "nice", "superb")
NEGATIVE = ("bad", "poor", "awful", "dull", "weak")
NEUTRAL = (
    "the",
    "a",
    "movie",
    "plot",
    "was",
    "really",
    "very",
    "actor",
    "it",
    "film",
    "story",
    "quite",
    "and",
    "end",
)
LENGTH, TRAIN_SAMPLES, EVAL_SAMPLES = 10, 512, 256


def reviews(seed: int, samples: int) -> tuple[list[str], list[int]]:
    """``samples`` sentences of neutral words with one sentiment word; label 1 = positive."""
    draw = random.Random(seed)
    texts, labels = [], []
    for _ in range(samples):
        label = draw.randrange(2)
        words = [draw.choice(NEUTRAL) for _ in range(LENGTH - 3)]
        words.insert(draw.randrange(len(words) + 1), draw.choice(POSITIVE if label else NEGATIVE))
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def tokenizer() -> Any:
    """A word-level tokenizer over the reviews' vocabulary, built in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {word: i for i, word in enumerate([*specials, *POSITIVE, *NEGATIVE, *NEUTRAL])}
    words = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=words,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )


def train(run: TrainingRun, day: str) -> dict[str, float]:
    """Train the classifier on ``day``'s reviews (``YYYY-MM-DD``) at Zeus's batch size."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainingArguments,
    )

    from zeus_airflow.integrations.huggingface import ZeusTrainerCallback

    torch.set_num_threads(1)
    seed = int(day.replace("-", ""))
    tokens = tokenizer()

    def dataset(offset: int, samples: int) -> list[dict[str, Any]]:
        texts, labels = reviews(seed + offset, samples)
        batch = tokens(
            texts, padding="max_length", max_length=LENGTH + 1, truncation=True, return_tensors="pt"
        )
        return [
            {
                "input_ids": batch["input_ids"][i],
                "attention_mask": batch["attention_mask"][i],
                "labels": torch.tensor(labels[i]),
            }
            for i in range(samples)
        ]

    torch.manual_seed(seed)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=tokens.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=LENGTH + 1,
            num_labels=2,
        )
    )
    args = TrainingArguments(
        tempfile.mkdtemp(prefix="hf_finetune-"),
        eval_strategy="epoch",
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        seed=seed,
    )
    zeus = ZeusTrainerCallback(run, args, metric="accuracy")  # before the Trainer

    def accuracy(prediction: Any) -> dict[str, float]:
        return {
            "accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())
        }

    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=dataset(0, TRAIN_SAMPLES),
        eval_dataset=dataset(1, EVAL_SAMPLES),
        compute_metrics=accuracy,
        callbacks=[zeus],
    )
    trainer.train()
    return {"accuracy": run.last_metric or 0.0}


with DAG(
    dag_id="hf_finetune",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "example", "simulated", "huggingface"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=train,
        train_kwargs={"day": "{{ ds }}"},
        batch_sizes=[8, 16, 32, 64],
        default_batch_size=32,
        target_metric=0.95,
        max_epochs=8,
        device="simulated:v100",
        warmup_steps=2,
        profile_steps=4,
    )
