"""``hparams_search=optuna``: Optuna studies (``studies.py``) for the sweeper plugin
(``hydra_plugins/mha_optuna_sweeper``), each job's pruning callback (``pruning.py``, a Keras callback in the
``callbacks:`` group), the sweep's checks before any job starts (``callback.py``, a Hydra callback) and the
study's section of the sweep report (``report_section.py``); all named by ``configs/hparams_search/optuna.yaml``."""
