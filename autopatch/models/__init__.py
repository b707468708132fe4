"""Tiny models of any transformers architecture, built offline (nothing downloaded) with random weights, and the
input sets a user's code gives them. Serves ``autopatch validate``, the sweep, the coverage catalogue and the tests.

    tiny       the architectures of transformers' auto mappings, each config class's defaults shrunk (sizes only),
               the model built, its steps and their three input sets
    builders   input sets: prefill, decode from the model's own eager prefill, seq2seq, left-padded batches
    vlms       hand-sized VLMs whose towers give a known number of image features (Llava's family, Idefics,
               SmolVLM, Fuyu), and their prefill inputs

Never imported by the agent's start-up: only on demand, by the commands and tools that build models.
"""
