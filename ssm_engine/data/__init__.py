"""ssm_engine.data: speech-to-text training data from offline voices (``parley data stt``).

    from ssm_engine.data import GenerateConfig, generate
    generate(GenerateConfig(out_dir="data/stt/v1", n_train=4500, n_heldout=300))

Modules: texts (caller-style sentences), voices (flite, espeak-ng, pico, mbrola through their
programs), augment (phone channel), audio (WAV, resampling, mu-law), manifest (path<TAB>text),
generate (parallel generation with a progress bar), errors. Synthesisers run as subprocesses.
"""

from .errors import DataError, ManifestError, SynthesisError, VoiceUnavailableError
from .generate import GenerateConfig, generate
from .manifest import read_manifest, write_manifest

__all__ = ["GenerateConfig", "generate", "read_manifest", "write_manifest", "DataError",
           "ManifestError", "SynthesisError", "VoiceUnavailableError"]
