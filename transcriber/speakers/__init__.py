"""Who speaks when: pyannote segmentation-3.0 and CAM++ speaker embeddings, ported to MLX.

The weights come from torch checkpoint files read without torch (checkpoint.py: an unpickler
that rebuilds tensors and plain containers only), converted once to safetensors in the cache
(weights.py: ``transcribe models pull speakers``). segmentation.py is the local "who speaks in
this 10 s window" model, campplus.py (on fbank.py's features) the speaker embedding,
clustering.py and pipeline.py the whole-file pass (``Diarizer.diarize`` -> speaker turns).
This room knows no other room: only the shared modules.
"""
