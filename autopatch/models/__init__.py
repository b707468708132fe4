"""Tiny models of any transformers architecture, built offline (nothing downloaded) with random weights, and the
input sets a user's code gives them. Serves ``autopatch validate``, the sweep, the coverage catalogue and the tests.

    tiny       the architectures of transformers' auto mappings, each config class's defaults shrunk (sizes only),
               the model built, its steps and their three input sets
    builders   input sets: prefill, decode from the model's own eager prefill, seq2seq, left-padded batches
    handmade   hand-sized decoders and encoder-decoders by name, for the regimes defaults do not reach, and the
               shared tiny sizes
    recurrent  hand-sized state-space and hybrid models by name (Mamba's family, Jamba, Bamba, FalconH1, LFM2, the
               linear-attention hybrids) and their decode steps
    vlms       hand-sized VLMs whose towers give a known number of image features (Llava's family, Idefics,
               SmolVLM, Fuyu), and their prefill inputs
    packed_vlms  Qwen2-VL-family VLMs whose images are packed into one patch sequence, their prefills and shapes

Never imported by the agent's start-up: only on demand, by the commands and tools that build models.
"""
