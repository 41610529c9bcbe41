"""Backends: one causal LM each, generating one reasoning step per row of a batch.

The interface (:mod:`.base`), the tokenizer-only vocabulary check (:mod:`.vocab`), ``--backend auto``
(:mod:`.auto`), a backend built by kind (:mod:`.build`), the engines (:mod:`.hf` with its step engine :mod:`.hf_engine` and its static cache :mod:`.static_cache` /
:mod:`.cuda_graphs`, :mod:`.llamacpp` with
:mod:`.llamacpp_ffi` and :mod:`.llamacpp_tokenizer`, :mod:`.vllm`, random weights: :mod:`.random_weights` and
:mod:`.hf_random`) and what they are built from (steps, n-gram proposals, engine rows, numpy sampling, pass
records).  Nothing here imports :mod:`lrref.decode`, :mod:`lrref.verify` or :mod:`lrref.profiling`.
"""
