"""Several devices and processes (``trainer/strategy=mirrored|data_parallel``: ``devices.py``'s functions, the
``_target_`` of ``trainer.strategy``): ``mirrored`` is ``tf.distribute.MirroredStrategy`` over the local GPUs (or
logical CPUs); ``data_parallel`` is ``keras.distribution.DataParallel`` on JAX, over this machine's devices and,
with Keras's ``KERAS_DISTRIBUTION_*`` variables, over several processes, each feeding its slice of every batch
and writing its own run directory; the settings' checks are in ``config.py``."""
