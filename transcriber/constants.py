"""Audio and time units shared by every module: each one defined here only.

Outside the decoding code, time is seconds of the source file (float). Inside it, two frame
units are used: mel frames (10 ms, one per ``HOP_LENGTH`` samples) and encoder positions (20 ms:
the encoder's second convolution has stride ``INPUT_STRIDE``), which are also the unit of
Whisper's timestamp tokens.
"""

SAMPLE_RATE = 16000  # Hz: ffmpeg resamples every input to this
N_FFT = 400  # 25 ms STFT window
HOP_LENGTH = 160  # 10 ms hop: one mel frame per 10 ms
CHUNK_LENGTH = 30  # seconds per Whisper window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples per window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames per window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100 mel frames per second
INPUT_STRIDE = 2  # mel frames per encoder position
TOKENS_PER_SECOND = FRAMES_PER_SECOND // INPUT_STRIDE  # 50 encoder positions per second
TIME_PRECISION = INPUT_STRIDE * HOP_LENGTH / SAMPLE_RATE  # 0.02 s: one position, one timestamp step
MEDIAN_FILTER_WIDTH = 7  # positions: smooths cross-attention before DTW and AlignAtt's argmax

DEFAULT_MODEL = "tiny.en"  # --model's default (here: the CLI reads it without loading a model)
