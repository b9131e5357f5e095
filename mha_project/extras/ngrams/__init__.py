"""Wide and deep (``model=wide_deep``, ``experiment=wide_deep``): a bag of every n-gram of the whole text beside the
encoder, or alone (``model/backbone=none``): ``layers.py``'s bags (naive-Bayes-weighted, TF-IDF or fastText's mean
embedding: ``model/ngram_branch``), their logits added to the encoder's (``classifier.py``:
``WideAndDeepClassifier``), under one softmax or one sigmoid per class (``model.objective``, with
``loss=one_vs_rest``); the bag's own learning rate (``optimizer=wide_deep``). docs/ngrams.md has the measurements."""
