"""Capriccio (paper §6.4): daily slices of a Sentiment140-format tweet corpus, retrained daily.

- :mod:`corpus`: read and write the Sentiment140 CSV format, with errors naming the problem;
- :mod:`slicing`: one slice per calendar day, ``slice_size`` consecutive tweets, seeded split;
- :mod:`generator`: a synthetic corpus of the same schema that drifts day by day;
- :mod:`job`: the retraining job's settings (batch sizes, target, window...);
- :mod:`model` and :mod:`training`: a small PyTorch classifier and the train function the
  engine and ``ZeusTrainOperator`` run;
- :mod:`experiment` and :mod:`plot`: the 38-slice run through the real engine on a simulated
  GPU, and its figure.
"""
