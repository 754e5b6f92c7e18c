"""Device selection on the CPU: ``auto`` keeps the profiles checked against CPU records (smoke, full) on the
CPU and takes a CUDA GPU at paper; ``cuda`` without one is refused before any work, naming the parameter.
``torch.cuda.is_available`` is monkeypatched: no GPU is needed (nor used: nothing is put on the device)."""

import pytest
import torch

from rankcollapse.book import runner
from rankcollapse.book.device import resolve_device
from rankcollapse.book.params import ParameterError, common_params


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("profile", ["smoke", "full", None])
def test_auto_stays_on_the_cpu_where_records_were_made_on_it(gpu, profile):
    assert resolve_device("auto", profile) == torch.device("cpu")
    assert resolve_device("cpu", profile) == torch.device("cpu")
    assert resolve_device("cuda", profile) == torch.device("cuda")  # asked for explicitly


def test_auto_takes_the_gpu_at_paper(gpu):
    assert resolve_device("auto", "paper") == torch.device("cuda")
    assert resolve_device("cuda", "paper") == torch.device("cuda")
    assert resolve_device("cpu", "paper") == torch.device("cpu")


@pytest.mark.parametrize("profile", ["smoke", "full", "paper", None])
def test_without_a_gpu_auto_is_the_cpu_and_cuda_is_refused(no_gpu, profile):
    assert resolve_device("auto", profile) == torch.device("cpu")
    with pytest.raises(ParameterError, match="parameter 'device' = 'cuda'"):
        resolve_device("cuda", profile)


def test_the_runner_keys_and_checks_runs_by_the_device_they_will_use(gpu, monkeypatch):
    """prepare accepts cuda when there is one; the cache key of an auto run at smoke is the CPU run's, and at
    paper the GPU run's."""
    keys = {}
    for profile in ("smoke", "paper"):
        for device in ("auto", "cpu", "cuda"):
            resolved, _ = runner.prepare("decomposition", {}, profile, device)
            keys[profile, device] = runner.cache_key("decomposition", resolved)
    assert keys["smoke", "auto"] == keys["smoke", "cpu"] != keys["smoke", "cuda"]
    assert keys["paper", "auto"] == keys["paper", "cuda"] != keys["paper", "cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="'device'"):
        runner.prepare("decomposition", {}, "smoke", "cuda")


def test_the_device_parameter_says_what_auto_means():
    doc = next(p for p in common_params() if p.name == "device").doc
    assert "CPU at smoke and full" in doc and "GPU at paper" in doc


@pytest.mark.parametrize(("profile", "where"), [("smoke", "cpu"), ("paper", "cuda")])
def test_a_chapter_and_its_training_jobs_use_the_device_auto_became(gpu, tmp_path, profile, where):
    """The chapter's ``p.device`` is the resolved device, so the language-model chapters' training jobs
    (:func:`rankcollapse.repair.spec.train_device`) follow ``auto`` to the GPU at paper; the recorded
    parameters keep what was asked for."""
    from rankcollapse.book.notebook import Chapter
    from rankcollapse.chapters import schema
    from rankcollapse.repair.spec import train_device

    params = schema("decomposition").resolve({"profile": profile, "output_dir": str(tmp_path)})
    ch = Chapter("decomposition", params)
    assert ch.device == torch.device(where) and ch.p.device == where and train_device(ch.p.device) == where
    assert ch.params["device"] == "auto"
