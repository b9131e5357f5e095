import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread per TensorFlow op pool, in the workers and the processes they start: the workers already keep every
# core busy, and a tiny model's ops gain less from a second thread than they lose contending for the cores.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")  # JAX's, alike
# XLA's optimisation passes off: a tiny model's JAX process spends more time compiling its steps than running them.
os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"

ROOT = Path(__file__).resolve().parents[1]
# The scripts import their shared error handling, scripts/entry.py, as Python finds it beside a script it runs;
# the scripts run here in process (run_script) find it the same way.
sys.path.insert(0, str(ROOT / "scripts"))
from entry import free_port  # noqa: E402  (the tests that start servers import it from here)

# A model and data small enough for a CI machine with 2 cores: configs/debug/tiny.yaml (heads 2 x key_dim 8,
# embed 16, 160 examples per split, 1 epoch), the same definition people use with `debug=tiny`.
TINY = ["debug=tiny"]
EXTRAS = ROOT / "mha_project" / "extras"
# The lean profile, for a test that needs none of these artefacts: no attention images, no head view, no SavedModel.
# (an extra's key only where that extra is present: the core's tests pass without it.)
QUIET = ["logger.attention.every_n_epochs=0"] + [
    override
    for extra, override in (("head_view", "head_view.html=false"), ("savedmodel", "savedmodel.export=false"))
    if (EXTRAS / extra).is_dir()
]
TINY_ANY_HEADS = [o for o in TINY if not o.startswith("heads=")]


_COMPOSED = {}  # compose_cfg's: the config of each list of config-group choices, composed once a process


def compose_cfg(*overrides: str):
    """The config scripts/train.py would run with these overrides, for in-process train(cfg, run_dir).

    Hydra has no cache of its own and reads every config file again on each compose, so the config of the
    config-group choices (``debug=tiny``, ``model=wide_deep``) is composed once, and the value overrides
    (``epochs=2``) are applied to a copy as Hydra applies them after composing (its ``_apply_overrides_to_config``).
    Anything that does not apply so (a ``hydra.`` key, a bad value) is composed by Hydra, with Hydra's error."""
    import copy

    from hydra import compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        repository = GlobalHydra.instance().config_loader().repository
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        if not any(o.is_hydra_override() or o.is_sweep_override() for o in parsed):
            is_value = [isinstance(o.value(), dict) or not repository.group_exists(o.key_or_group) for o in parsed]
            groups = tuple(o.input_line for o, value in zip(parsed, is_value) if not value)
            if groups not in _COMPOSED:
                _COMPOSED[groups] = compose("train", overrides=list(groups))
            cfg = copy.deepcopy(_COMPOSED[groups])
            try:
                ConfigLoaderImpl._apply_overrides_to_config([o for o, v in zip(parsed, is_value) if v], cfg)
                return cfg
            except Exception:  # noqa: BLE001 - Hydra's own compose below gives Hydra's own error
                pass
        return compose("train", overrides=list(overrides))


def override(key: str, value) -> str:
    """``key=value`` as a command line writes it (``null``, ``true``)."""
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    return f"{key}={shown}"


def small_model(vocab_size: int = 20, num_classes: int = 2, *overrides: str, **changes):
    """The classifier ``debug=tiny`` builds (configs/debug/tiny.yaml, composed as the CLI composes it), with
    ``overrides`` and ``changes`` (a backbone argument, or the classifier's ``pooling`` / ``dropout``) on top, for
    ``vocab_size`` token ids and ``num_classes`` classes: the one small model the in-process tests build on."""
    import dataclasses

    from mha_project.config import BackboneConfig
    from mha_project.training.train import build_model

    backbone = {f.name for f in dataclasses.fields(BackboneConfig)}
    changed = [override(f"model.backbone.{k}" if k in backbone else f"model.{k}", v) for k, v in changes.items()]
    return build_model(compose_cfg(*TINY, *overrides, *changed), vocab_size, num_classes)


def load_splits(data, seed: int):
    """The splits ``train`` would carve from a ``data:`` config node with ``seed``."""
    from hydra.utils import instantiate

    return instantiate(data).splits(int(seed))


# Scripts whose own command line the tests drive in process, through the same ``main`` a user runs: the
# analysis tools (argparse, a library call, one-line errors) and ``train.py`` (Hydra's ``@hydra.main``:
# it composes, runs the callbacks and ``train(cfg)``, then clears Hydra's global state), and the benchmark.
# A fresh Python + TensorFlow start-up per call was most of the suite's time. The checks of several
# processes stay subprocesses; so does any call with its own environment, and every test that asks for
# ``fresh_process=True`` says why in one line.
IN_PROCESS_SCRIPTS = {
    "train.py",
    "evaluate.py",
    "inspect_attention.py",
    "fill_mask.py",
    "head_patterns.py",
    "head_importance.py",
    "head_patching.py",
    "sweep_report.py",
    "time_to_accuracy.py",
    "benchmark.py",
    "predict.py",
    "scale_table.py",
}


def run_script(
    script: str, *args: str, timeout: int = 300, env=None, fresh_process: bool = False
) -> subprocess.CompletedProcess:
    if script in IN_PROCESS_SCRIPTS and env is None and not fresh_process:
        return _run_script_in_process(script, *args)
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_script_in_process(script: str, *args: str) -> subprocess.CompletedProcess:
    """``python scripts/SCRIPT ARGS`` as ``runpy`` runs it: the exit status, stdout and stderr (an uncaught
    exception's traceback included, as the interpreter prints it). The root logger's handlers are put back
    afterwards: Hydra points them at this call's output and the run's ``train.log``, which nothing else may
    write into."""
    import io
    import logging
    import runpy
    import signal
    import traceback

    import keras
    from absl import logging as absl_logging

    # Hydra's logging set-up closes every handler's stream that is not the current sys.stderr / sys.stdout:
    # absl's handler would take pytest's stderr with it while the output is redirected here.
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    path = ROOT / "scripts" / script
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd, code = sys.argv[:], os.getcwd(), 0
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    # A script's own signal handlers and wake-up descriptor (train.py, predict.py) are for its own process.
    saved_signals = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    saved_wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(saved_wakeup)
    sys.argv[:] = [str(path), *args]
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exit_:  # sys.exit(None | int | message), as the interpreter reads it
                if exit_.code is None or isinstance(exit_.code, int):
                    code = exit_.code or 0
                else:
                    print(exit_.code, file=sys.stderr)
                    code = 1
            except BaseException:  # noqa: BLE001 - reported as the interpreter would: a traceback, exit 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv[:] = saved_argv
        os.chdir(saved_cwd)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(saved_wakeup)
        for handler in root.handlers[:]:
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved_level)
        keras.mixed_precision.set_global_policy("float32")  # a new process's policy, for what runs next
    return subprocess.CompletedProcess([sys.executable, str(path), *args], code, out.getvalue(), err.getvalue())


def assert_clean_failure(result, *needles) -> None:
    """A command that failed as the entry points promise: a non-zero exit, no traceback, each needle said."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    for needle in needles:
        assert needle in output, output[-2000:]


def kill_when(cmd: list, ready, env: dict, timeout: float = 240) -> None:
    """Start ``cmd``, SIGKILL it as soon as ``ready()`` is true (a run killed mid-training); fail if it
    ends first."""
    import signal
    import time

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        assert proc.poll() is None, "training ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()


def train_command(run_dir: Path, *overrides: str) -> list[str]:
    """``python scripts/train.py OVERRIDES hydra.run.dir=RUN_DIR``, for a test that starts it as a process."""
    return [sys.executable, str(ROOT / "scripts" / "train.py"), *overrides, f"hydra.run.dir={run_dir}"]


def train_tiny(run_dir: Path, *overrides: str, timeout: int = 300, fresh_process=False) -> subprocess.CompletedProcess:
    return run_script(
        "train.py", *TINY, f"hydra.run.dir={run_dir}", *overrides, timeout=timeout, fresh_process=fresh_process
    )


@contextlib.contextmanager
def made_once(tmp_path_factory, worker_id: str, name: str):
    """A folder for the whole session, whatever the number of xdist workers (pytest-xdist's recipe for a session
    fixture, with ``flock`` for its lock): yields ``(path, made)``; the first worker in makes it (``made`` is
    false) while the others wait, then all read it and none writes into it (copy it first)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent  # the folder all workers of this session share
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root / name, (root / name / "made").exists()
        (root / name).mkdir(exist_ok=True)
        (root / name / "made").touch()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, worker_id) -> Path:
    """One finished tiny training run made by the real CLI, shared by the tests that read a run."""
    with made_once(tmp_path_factory, worker_id, "tiny_run") as (folder, made):
        run_dir = folder / "run"
        if not made:
            # A fresh process: the one `python scripts/train.py` smoke run, whose start-up must be quiet.
            result = train_tiny(run_dir, fresh_process=True)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            (folder / "stdout.txt").write_text(result.stdout)
            (folder / "stderr.txt").write_text(result.stderr)
    return run_dir


def write_folder_dataset(root: Path, classes=("neg", "pos"), per_class: int = 12, extra_train=("unsup",)):
    """DIR/{train,test}/<class>/*.txt in the aclImdb layout, with words that tell the classes apart."""
    words = {"neg": "awful boring bad", "pos": "great lovely good", "mid": "fine okay average"}
    for split in ("train", "test"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                (d / f"{i}_{split}.txt").write_text(f"{words.get(c, c)} film number {i} {split}")
    for extra in extra_train:
        d = root / "train" / extra
        d.mkdir(parents=True, exist_ok=True)
        (d / "0.txt").write_text("no label here")
    return root


@contextlib.contextmanager
def tensorboard_server(*args: str):
    """A real ``tensorboard`` (``args``: --logdir DIR or --logdir_spec ...) on a free port; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", *args, "--port", str(port), "--host", "127.0.0.1"]
        + ["--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium, headless, driven by Playwright: one browser for the session, a fresh page per test
    (``page``). Playwright's own browser download is not used (``executable_path``)."""
    executable = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if executable is None:
        if os.environ.get("MHA_REQUIRE_BROWSER"):
            pytest.fail("no chromium on PATH; .ci/run installs Debian's chromium package")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


# Installed into every test page (Playwright's init script), never into the product: a number that changes
# when a canvas's picture does (the alpha of each pixel, weighted by place), over its top `rows` rows.
CANVAS_CHECKSUM = """window.canvasChecksum = (canvas, rows = Infinity) => {
  const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, Math.min(canvas.height, rows)).data;
  let sum = 0;
  for (let i = 3; i < px.length; i += 4) sum = (sum + px[i] * ((i >> 2) % 9973 + 1)) % 1000000007;
  return sum;
};"""


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.add_init_script(CANVAS_CHECKSUM)
    yield context.new_page()
    context.close()


HEAD_VIEW_DRIVER = (ROOT / "tests" / "head_view_driver.js").read_text(encoding="utf-8")


def drive_head_view(page, selector: str = "body", heads: bool = True) -> dict:
    """Click through the head view inside ``selector`` as a person would (tests/head_view_driver.js): the
    head chips and hovering (``heads``), then every head at once; what each step drew."""
    page.wait_for_selector(f"{selector} #queries .token", state="attached")
    return page.evaluate(HEAD_VIEW_DRIVER, [selector, heads])


@contextlib.contextmanager
def logged(name: str):
    """The messages logger ``name`` emits (INFO and up) in the block (pytest's own capture is off: -p no:logging)."""
    messages, handler, logger = [], logging.Handler(), logging.getLogger(name)
    handler.emit = lambda record: messages.append(record.getMessage())
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def poll(ask, ready=bool, seconds: float = 90):
    """``ask()`` every half second until ``ready(answer)`` or ``seconds`` pass (a server still starting, a
    log still loading); the last answer."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = ask()
            if ready(answer) or time.monotonic() > deadline:
                return answer
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def run_sweep(sweep: Path, *overrides: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``train.py -m`` with a tiny, quiet model and ``overrides``, into ``sweep``."""
    return run_script("train.py", "-m", *overrides, *QUIET, f"hydra.sweep.dir={sweep}", timeout=timeout)


# Values out of their range: each is refused with one line naming it (in-process and by the CLI).
OUT_OF_RANGE = [
    "heads=0",
    "heads=-1",
    "key_dim=0",
    "value_dim=-5",
    "layers=0",
    "seq_len=0",
    "batch_size=0",
    "epochs=0",
    "lr=0",
    "dropout=1.5",
    "dropout=-0.1",
    "data.limit=0",
]


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory, worker_id) -> Path:
    """heads=0 (fails validation), 1 and 2: two finished jobs and one failed, by the real CLI; made once for the
    whole session (``made_once``), so every test reads it and none writes into it (copy it first)."""
    with made_once(tmp_path_factory, worker_id, "sweep") as (folder, made):
        path = folder / "s"
        if not made:
            result = run_sweep(path, "heads=0,1,2", *TINY_ANY_HEADS)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            (folder / "stdout.txt").write_text(result.stdout)
    return path


def scalar_events(log_dir: Path, prefix: str) -> dict:
    """tag -> [(step, value), ...] of every summary under log_dir whose tag starts with ``prefix`` (scalars)."""
    import tensorflow as tf

    scalars = {}
    for path in log_dir.rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag.startswith(prefix):
                    scalars.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return scalars


def event_records(log_dir: Path) -> dict:
    """tag -> plugin name, for every summary under log_dir."""
    tags = {}
    for path in log_dir.rglob("events.out.tfevents.*"):
        for event in __import__("tensorflow").compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags[value.tag] = value.metadata.plugin_data.plugin_name
    return tags


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject.toml's addopts): a worker per core, each running TensorFlow on one thread (above)."""
    return len(os.sched_getaffinity(0))


# The middle tier (`-m "not slow or core"`): with the fast tier, each feature's slow end-to-end test once, chosen
# for being cheap (a shared run, no process of its own). data=relations (its runs must learn: ~50 s) and the
# Attention tab's browser test are left to the full suite; their fast tests run here.
CORE = {
    "tests/test_train.py::test_train_returns_what_it_records",
    "tests/test_train_cli.py::test_train_prints_run_dir_and_accuracy_last",
    "tests/test_train_cli.py::test_evaluate_reproduces_recorded_test_metrics",
    "tests/test_attention.py::test_inspect_attention_cli",
    "tests/test_layers.py::KerasLayerChecks::test_encoder_backbone",
    "tests/test_data.py::test_pipeline_pads_to_buckets_not_seq_len",
    "tests/test_config.py::test_every_option_of_every_group_composes[data]",
    "tests/test_errors.py::test_nan_loss_stops_with_a_clear_message",
    "tests/test_sweeps.py::test_multirun_jobs_keep_their_own_results",
    "tests/test_run_dir.py::test_without_a_run_record_train_uses_only_an_empty_dir_and_records_its_stages",
    "tests/test_schedules.py::test_the_train_step_is_traced_once_across_fits_and_shapes",
    "tests/test_mha_basics.py::test_mha_basics_script_prints_shapes",
    "tests/test_performance.py::test_ensemble_of_a_run_with_itself_is_the_run_and_other_splits_are_refused",
    "tests/extras/test_distribution.py::test_a_process_whose_peers_never_come_says_so_and_gives_up_in_one_line",
    "tests/extras/test_folders.py::test_folder_texts_stay_on_disk_and_batch_exactly_as_texts_in_memory",
    "tests/extras/test_head_analysis.py::test_head_importance_cli",
    "tests/extras/test_head_analysis.py::test_head_patterns_cli_json",
    "tests/extras/test_head_view.py::test_every_run_writes_a_head_view_and_inspect_writes_one_on_request",
    "tests/extras/test_head_view.py::test_the_model_view_shows_every_layer_and_head_and_a_click_opens_one[128]",
    "tests/extras/test_hparams.py::test_tensorboard_hparams_dashboard_shows_typed_swept_keys_and_every_status",
    "tests/extras/test_ngrams.py::test_the_bag_alone_trains_and_the_attention_tools_say_it_has_none",
    "tests/extras/test_optuna.py::test_a_journal_file_holds_a_study",
    "tests/extras/test_pretraining.py::test_pretrain_from_reuses_the_encoder_and_checks_it",
    "tests/extras/test_rotary.py::test_rotary_classifier_has_no_position_table_and_round_trips",
    "tests/extras/test_run_record.py::test_same_command_again_reports_finished_and_rewrites_nothing",
    "tests/extras/test_run_record_resume.py::test_disk_full_while_saving_names_the_stage_and_the_same_command_resumes",
    "tests/extras/test_savedmodel.py::test_the_export_reads_the_tokens_training_read[tail-head]",
    "tests/extras/test_sweep_report.py::test_sweep_report",
    "tests/extras/test_tables.py::test_the_test_split_is_a_seeded_stratified_share_or_a_second_file",
    "tests/extras/test_tfds.py::test_tfds_loaders_with_mock_data[imdb-imdb_reviews-2]",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its own hook, --dist loadgroup)
def pytest_collection_modifyitems(config, items) -> None:
    spread_longest_first(items)
    ids = {item.nodeid for item in items}
    for item in items:
        if item.nodeid in CORE:
            item.add_marker(pytest.mark.core)
    files = {item.nodeid.split("::")[0] for item in items}
    selected = config.option.keyword or config.option.markexpr or any("::" in arg for arg in config.args)
    gone = sorted(t for t in CORE if t.split("::")[0] in files and t not in ids)
    if gone and not selected:  # whole files collected, so a CORE name missing from them is a renamed test
        raise pytest.UsageError(f"conftest.CORE names tests that do not exist (renamed?): {', '.join(gone)}")


def spread_longest_first(items) -> None:
    """The order and units in which pytest-xdist hands out tests (pyproject.toml: --dist loadgroup). A test is its
    own unit, so one slow file no longer fills one worker; the tests of a file that share a module-scoped fixture
    (a trained run, a sweep) are one unit (an ``xdist_group``), so it is made once. Units go out longest first as
    far as xdist lets them: it hands out the groups first, most tests first (its --loadscope-reorder), then the single
    tests in this order: those that start processes, then the other slow ones, then the rest."""

    def unit(item) -> str:
        fixtures = item._fixtureinfo.name2fixturedefs.values() if hasattr(item, "_fixtureinfo") else ()
        return item.nodeid.split("::")[0] if any(defs[-1].scope == "module" for defs in fixtures) else item.nodeid

    def rank(item) -> int:
        return 0 if item.get_closest_marker("subprocess") else 1 if item.get_closest_marker("slow") else 2

    units, order = {}, {}
    for index, item in enumerate(items):
        units[item] = name = unit(item)
        if name != item.nodeid:
            item.add_marker(pytest.mark.xdist_group(name))
        first, best = order.get(name, (index, 2))
        order[name] = (first, min(best, rank(item)))
    items.sort(key=lambda item: (order[units[item]][1], order[units[item]][0]))
