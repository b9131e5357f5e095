"""The project's Hydra sweeper on Optuna's ask-and-tell API (``hparams_search=optuna``).

Written here because no maintained Hydra sweeper runs on Optuna >= 4 (hydra-optuna-sweeper 1.3 requires
optuna<3); Hydra finds it in the ``hydra_plugins`` namespace like any installed plugin.
"""
